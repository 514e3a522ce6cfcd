/* status.c — status names and error-message helper (see status.h). */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>

const char *sd_status_str(sd_status st)
{
    switch (st) {
    case SD_OK: return "ok";
    case SD_ERR_IO: return "i/o error";
    case SD_ERR_FORMAT: return "malformed input";
    case SD_ERR_UNSUPPORTED: return "unsupported";
    case SD_ERR_NOMEM: return "out of memory";
    case SD_ERR_ARG: return "invalid argument";
    case SD_ERR_NOSPACE: return "no space";
    case SD_ERR_STATE: return "invalid state";
    case SD_ERR_NOTFOUND: return "not found";
    case SD_ERR_DEVICE: return "device error";
    case SD_ERR_TIMEOUT: return "timeout";
    default: return "unknown error";
    }
}

sd_status sd_seterr(char *err, size_t errlen, sd_status st, const char *fmt, ...)
{
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return st;
}
