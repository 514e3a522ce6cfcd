/* assets.h — the playground's files, embedded in specd-router at build
 * time (embed.cmake): no files to install, nothing fetched at run time. */
#ifndef SD_PLAYGROUND_ASSETS_H
#define SD_PLAYGROUND_ASSETS_H

#include <stddef.h>

typedef struct sd_asset {
    const char *name; /* file name, e.g. "app.js" */
    const unsigned char *data;
    size_t len;
} sd_asset;

/* Ends with an entry whose name is NULL. */
extern const sd_asset sd_playground_assets[];

#endif
