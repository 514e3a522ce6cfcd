/* plot.h — --plot for specd-bench: latency CDFs (TTFT, TPOT, E2E) and output
 * tokens/s over time (1 s bins) drawn by gnuplot into one PNG.
 *
 * The data files and the script go to a fresh temporary directory, which is
 * removed after a successful plot and kept (path in the message) otherwise. */
#ifndef SD_BENCH_PLOT_H
#define SD_BENCH_PLOT_H

#include <stddef.h>

#include "runner.h"

/* Draws res into png_path (pngcairo terminal when gnuplot has it, else png).
 * Returns SD_OK, SD_ERR_NOTFOUND (gnuplot is not installed), SD_ERR_IO
 * (temp files, or gnuplot failed) or SD_ERR_NOMEM, with a message in err. */
sd_status sd_plot_write(const char *png_path, const sd_bench_result *res, char *err, size_t errlen);

#endif
