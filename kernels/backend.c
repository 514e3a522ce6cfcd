/* backend.c — backend-independent helpers (see backend.h). */
#include "backend.h"

void sd_backend_free(sd_backend *be)
{
    if (be && be->ops && be->ops->destroy) be->ops->destroy(be);
}
