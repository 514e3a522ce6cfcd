/* flags.h — a program's command-line flags as one table: getopt_long's
 * options are built from it and `--help` is printed from it, so what a
 * program accepts and what its help says cannot drift apart.
 *
 * Each flag has a group (its heading in --help: "Model", "Speculation",
 * "Scheduling", "Memory", "Network", "Security", ...; groups print in the
 * order they first appear), a metavariable for its value (NULL: a switch), the
 * default as a user reads it (NULL: none) and a description with its units.
 * docs/FLAGS.md is generated from the --help of each program
 * (scripts/gen_flags_doc.sh; a suite test keeps the two equal). */
#ifndef SD_FLAGS_H
#define SD_FLAGS_H

#include <getopt.h>
#include <stddef.h>
#include <stdio.h>

typedef struct sd_flag {
    const char *group; /* heading in --help */
    const char *name;  /* long name without the dashes: "max-batch" */
    int code;          /* getopt_long's value for it, unique in its table */
    const char *arg;   /* metavariable ("N", "DIR", "auto|on|off"); NULL: a switch without a value */
    const char *def;   /* default as shown ("32", "all cores"); NULL: none */
    const char *help;  /* what it does, with units */
} sd_flag;

/* The most flags a table may hold. */
#define SD_FLAGS_MAX 96

/* Fills lo[0 .. n] with getopt_long's options for the n flags of t (and the
 * terminating zero entry); lo holds n + 1 entries. */
void sd_flags_options(const sd_flag *t, size_t n, struct option *lo);

/* Prints the help: `usage` (one or more lines, as given), a blank line,
 * `about` (wrapped; NULL: none), then each group's title and its flags,
 * "  --name ARG" then the description wrapped at 100 columns, and its default
 * in brackets. */
void sd_flags_help(FILE *f, const char *usage, const char *about, const sd_flag *t, size_t n);

/* Rewrites argv[1 .. argc) in place: each argument equal to `alias` becomes
 * `name` (a short spelling getopt_long cannot take, vLLM's -tp for
 * --tensor-parallel-size). */
void sd_flags_alias(int argc, char **argv, const char *alias, const char *name);

/* After a usage error: `usage` and a line saying that `prog --help` lists
 * every flag. */
void sd_flags_usage_error(FILE *f, const char *usage, const char *prog);

#endif
