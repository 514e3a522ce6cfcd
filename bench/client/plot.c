/* plot.c — gnuplot driver for --plot (see plot.h). */
#include "plot.h"

#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "stats.h"

#define DIR_MAX 1024             /* temp directory path */
#define PATH_MAX_ (DIR_MAX + 64) /* a file inside it */

extern char **environ;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Writes "value_ms cumulative_fraction" lines for one latency of the
 * successful requests; returns the number of points (-1 on I/O error). */
static long write_cdf(const char *path, const sd_bench_result *res, size_t field)
{
    double *v = malloc((res->n ? res->n : 1) * sizeof *v);
    FILE *f = fopen(path, "w");
    if (!v || !f) {
        free(v);
        if (f) fclose(f);
        return -1;
    }
    size_t m = 0;
    for (size_t i = 0; i < res->n; i++) {
        const sd_req_record *r = &res->recs[i];
        double x = field == 0 ? r->ttft : field == 1 ? r->tpot : r->e2e;
        if (r->err == SD_REQERR_NONE && isfinite(x)) v[m++] = x * 1e3;
    }
    qsort(v, m, sizeof *v, cmp_double);
    for (size_t i = 0; i < m; i++) fprintf(f, "%.6f %.6f\n", v[i], (double)(i + 1) / (double)m);
    free(v);
    return fclose(f) == 0 ? (long)m : -1;
}

/* Output tokens per 1 s bin. A streamed request's tokens are spread evenly
 * over its content chunks (chunk times come from TTFT + ITL); a
 * non-streamed one counts at its end. Returns bins written, -1 on error. */
static long write_tput(const char *path, const sd_bench_result *res)
{
    double end = res->wall > 0 ? res->wall : 0;
    size_t nb = (size_t)ceil(end) + 1;
    double *bins = calloc(nb, sizeof *bins);
    FILE *f = fopen(path, "w");
    if (!bins || !f) {
        free(bins);
        if (f) fclose(f);
        return -1;
    }
    for (size_t i = 0; i < res->n; i++) {
        const sd_req_record *r = &res->recs[i];
        if (r->err != SD_REQERR_NONE || r->output_tokens <= 0) continue;
        if (!isfinite(r->ttft) || r->content_chunks == 0) {
            size_t b = (size_t)fmax(0.0, fmin(r->start + r->e2e, end));
            bins[b < nb ? b : nb - 1] += (double)r->output_tokens;
            continue;
        }
        double per = (double)r->output_tokens / (double)(r->n_itl + 1), t = r->start + r->ttft;
        for (size_t k = 0; k <= r->n_itl; k++) {
            if (k > 0) t += r->itl[k - 1];
            size_t b = (size_t)fmax(0.0, t);
            bins[b < nb ? b : nb - 1] += per;
        }
    }
    for (size_t b = 0; b < nb; b++) fprintf(f, "%zu %.3f\n", b, bins[b]);
    free(bins);
    return fclose(f) == 0 ? (long)nb : -1;
}

static void panel(FILE *g, const char *dir, const char *file, long n, const char *title)
{
    fprintf(g, "set title '%s'\nset xlabel 'ms'\nset ylabel 'fraction of requests'\n", title);
    if (n > 0) fprintf(g, "plot '%s/%s' using 1:2 with steps lw 2 notitle\n", dir, file);
    else
        fprintf(g, "set label 1 'no data' at graph 0.45,0.5\nplot [0:1][0:1] NaN notitle\n"
                   "unset label 1\n");
}

static int write_script(const char *dir, const char *png, const long n[4])
{
    char path[PATH_MAX_];
    snprintf(path, sizeof path, "%s/plot.gp", dir);
    FILE *g = fopen(path, "w");
    if (!g) return -1;
    fprintf(g, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
               "  set terminal pngcairo size 1400,1000\n} else {\n"
               "  set terminal png size 1400,1000\n}\n");
    fprintf(g, "set output '%s'\nset grid\nset key off\n", png);
    fprintf(g, "set multiplot layout 2,2 title 'specd-bench'\n");
    panel(g, dir, "ttft.dat", n[0], "TTFT CDF");
    panel(g, dir, "tpot.dat", n[1], "TPOT CDF");
    panel(g, dir, "e2e.dat", n[2], "E2E latency CDF");
    fprintf(g,
            "set title 'output tokens/s (1 s bins)'\nset xlabel 's since start'\n"
            "set ylabel 'tok/s'\nset style fill solid 0.5\nset boxwidth 0.9\n"
            "set xrange [0:%ld]\nset yrange [0:*]\n"
            "plot '%s/tput.dat' using ($1+0.5):2 with boxes notitle\n",
            n[3] > 0 ? n[3] : 1, dir);
    fprintf(g, "unset multiplot\n");
    return fclose(g);
}

static sd_status run_gnuplot(const char *dir, char *err, size_t errlen)
{
    char script[PATH_MAX_];
    snprintf(script, sizeof script, "%s/plot.gp", dir);
    char *argv[] = {"gnuplot", script, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ);
    if (rc == ENOENT)
        return sd_seterr(err, errlen, SD_ERR_NOTFOUND,
                         "gnuplot is not installed (Debian: apt-get install gnuplot-nox); no plot written");
    if (rc != 0) return sd_seterr(err, errlen, SD_ERR_IO, "could not start gnuplot: %s", strerror(rc));
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        return sd_seterr(err, errlen, SD_ERR_IO, "gnuplot failed (script and data kept in %s)", dir);
    return SD_OK;
}

static void remove_dir(const char *dir)
{
    static const char *const files[] = {"ttft.dat", "tpot.dat", "e2e.dat", "tput.dat", "plot.gp"};
    char p[PATH_MAX_];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}

sd_status sd_plot_write(const char *png_path, const sd_bench_result *res, char *err, size_t errlen)
{
    if (strchr(png_path, '\'') || strchr(png_path, '\n'))
        return sd_seterr(err, errlen, SD_ERR_ARG, "--plot path must not contain quotes or newlines");
    const char *tmp = getenv("TMPDIR");
    char dir[DIR_MAX], p[PATH_MAX_];
    if (!tmp || !*tmp || strlen(tmp) > DIR_MAX - 32) tmp = "/tmp";
    snprintf(dir, sizeof dir, "%.*s/specd-bench-plot-XXXXXX", DIR_MAX - 32, tmp);
    if (!mkdtemp(dir)) return sd_seterr(err, errlen, SD_ERR_IO, "mkdtemp: %s", strerror(errno));
    static const char *const names[3] = {"ttft.dat", "tpot.dat", "e2e.dat"};
    long n[4];
    for (size_t k = 0; k < 3; k++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[k]);
        n[k] = write_cdf(p, res, k);
    }
    snprintf(p, sizeof p, "%s/tput.dat", dir);
    n[3] = write_tput(p, res);
    if (n[0] < 0 || n[1] < 0 || n[2] < 0 || n[3] < 0 || write_script(dir, png_path, n) != 0)
        return sd_seterr(err, errlen, SD_ERR_IO, "could not write plot data under %s", dir);
    sd_status st = run_gnuplot(dir, err, errlen);
    if (st != SD_ERR_IO) remove_dir(dir);
    return st;
}
