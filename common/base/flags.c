/* flags.c — see flags.h. */
#include "flags.h"

#include <stdbool.h>
#include <string.h>

#define HELP_WIDTH 100
#define NAME_COL 32 /* descriptions start here */

void sd_flags_options(const sd_flag *t, size_t n, struct option *lo)
{
    for (size_t i = 0; i < n; i++)
        lo[i] = (struct option){
            .name = t[i].name, .has_arg = t[i].arg ? required_argument : no_argument, .flag = NULL, .val = t[i].code};
    lo[n] = (struct option){0};
}

/* Writes text wrapped at HELP_WIDTH, the first line starting at column col
 * (already reached), the others indented to indent. */
static void wrap(FILE *f, const char *text, int col, int indent)
{
    const char *p = text;
    while (*p) {
        while (*p == ' ') p++;
        size_t w = strcspn(p, " ");
        if (!w) break;
        if (col > indent && col + 1 + (int)w > HELP_WIDTH) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', f);
            col++;
        }
        for (size_t i = 0; i < w; i++) fputc(p[i] == '\x01' ? ' ' : p[i], f); /* \x01: a space kept */
        col += (int)w;
        p += w;
    }
    fputc('\n', f);
}

/* One flag's lines. */
static void print_flag(FILE *f, const sd_flag *fl)
{
    char head[128];
    int col = snprintf(head, sizeof head, "  --%s%s%s", fl->name, fl->arg ? " " : "", fl->arg ? fl->arg : "");
    fputs(head, f);
    if (col >= NAME_COL - 1) {
        fprintf(f, "\n%*s", NAME_COL, "");
    } else {
        fprintf(f, "%*s", NAME_COL - col, "");
    }
    char text[2048];
    /* "[default:" stays on the line of the default's first word */
    if (fl->def) snprintf(text, sizeof text, "%s [default:\x01%s]", fl->help, fl->def);
    else snprintf(text, sizeof text, "%s", fl->help);
    wrap(f, text, NAME_COL, NAME_COL);
}

void sd_flags_help(FILE *f, const char *usage, const char *about, const sd_flag *t, size_t n)
{
    fputs(usage, f);
    if (about) {
        fputc('\n', f);
        wrap(f, about, 0, 0);
    }
    /* groups in the order they first appear; each flag once */
    for (size_t i = 0; i < n; i++) {
        bool first = true;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(t[j].group, t[i].group)) first = false;
        if (!first) continue;
        fprintf(f, "\n%s:\n", t[i].group);
        for (size_t j = i; j < n; j++)
            if (!strcmp(t[j].group, t[i].group)) print_flag(f, &t[j]);
    }
}

void sd_flags_usage_error(FILE *f, const char *usage, const char *prog)
{
    fprintf(f, "%s(%s --help lists every flag)\n", usage, prog);
}

void sd_flags_alias(int argc, char **argv, const char *alias, const char *name)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], alias)) argv[i] = (char *)name;
}
