/* http.c — URL building and blocking GETs (see http.h). */
#include "http.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"

sd_status sd_http_url(char *out, size_t outlen, const char *base, const char *path)
{
    size_t n = strlen(base);
    while (n > 0 && base[n - 1] == '/') n--;
    if (n >= 3 && memcmp(base + n - 3, "/v1", 3) == 0) n -= 3; /* every path we use is absolute from the server root */
    int w = snprintf(out, outlen, "%.*s%s", (int)n, base, path);
    return (w < 0 || (size_t)w >= outlen) ? SD_ERR_NOSPACE : SD_OK;
}

#define MAX_BODY ((size_t)64 << 20) /* refuse absurd bodies */

static size_t on_body(char *p, size_t sz, size_t nm, void *ud)
{
    sd_buf *m = ud;
    size_t n = sz * nm;
    if (n > MAX_BODY - m->len || sd_buf_add(m, p, n) != SD_OK) return 0; /* aborts the transfer */
    return n;
}

sd_status sd_http_get(const char *url, const char *api_key, double timeout_s, char **body, long *status, char *err,
                      size_t errlen)
{
    *body = NULL;
    *status = 0;
    CURL *h = curl_easy_init();
    if (!h) return sd_seterr(err, errlen, SD_ERR_NOMEM, "curl_easy_init failed");
    sd_buf m = {0};
    struct curl_slist *hdrs = NULL;
    char auth[1024];
    if (api_key && *api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", api_key);
        hdrs = curl_slist_append(hdrs, auth);
    }
    char cerr[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1000.0));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &m);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
    CURLcode rc = curl_easy_perform(h);
    sd_status st = SD_OK;
    if (rc != CURLE_OK) {
        st = sd_seterr(err, errlen, SD_ERR_IO, "GET %s: %s", url, cerr[0] ? cerr : curl_easy_strerror(rc));
    } else {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
        if (!(*body = sd_buf_take(&m))) st = sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    }
    sd_buf_free(&m);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    return st;
}

char *sd_http_first_model(const char *base, const char *api_key, double timeout_s, char *err, size_t errlen)
{
    char url[2048], *body = NULL, *id = NULL;
    long status = 0;
    if (sd_http_url(url, sizeof url, base, "/v1/models") != SD_OK) {
        sd_seterr(err, errlen, SD_ERR_ARG, "URL too long");
        return NULL;
    }
    if (sd_http_get(url, api_key, timeout_s, &body, &status, err, errlen) != SD_OK) return NULL;
    json_t *root = status == 200 ? json_loads(body, 0, NULL) : NULL;
    json_t *data = json_object_get(root, "data");
    const char *s = json_string_value(json_object_get(json_array_get(data, 0), "id"));
    if (s) id = strdup(s);
    else if (status != 200) sd_seterr(err, errlen, SD_ERR_IO, "GET %s: HTTP %ld", url, status);
    else sd_seterr(err, errlen, SD_ERR_FORMAT, "GET %s: no model id in the response", url);
    json_decref(root);
    free(body);
    return id;
}
