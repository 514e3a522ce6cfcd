/* regime.h — the regime test of adaptive speculation: does drafting, as
 * the step model chooses it, really make more tokens per second than not
 * drafting at all?
 *
 * The step model prices each step's plan from the steps it has measured,
 * and it prices the plain alternative from the plain steps it has seen —
 * but a plain step taken now and then inside a drafting regime prices
 * plain decoding by when it ran (on a CPU, 2 cores, 16 requests: 18–32%
 * dearer than a never-drafting server's steps — the cold steps after the
 * first prompts, single refreshes), and some costs are in no step at all
 * (the work between steps). So the verifier also measures the regimes themselves: it runs
 * blocks of decode steps either as the step model chooses (drafting) or with
 * no drafts at all (plain: no probe, the drafter asked for nothing; a
 * request's own num_draft still counts), and compares their rates: tokens
 * committed per ms, over whole cycles — from the end of one step to the end
 * of the next, the router's and the drafter's messages included. No model
 * figure enters the comparison: the model's price of a plain step is just
 * what is in doubt (it depends on when the plain steps it learnt from ran),
 * and blocks of the two regimes alternate under the same load, so the load's
 * drift (context growing, requests coming and going) hits both alike. A
 * block is SD_REGIME_WARM steps not measured (the drafter catching up or
 * winding down) and then
 * SD_REGIME_STEPS measured ones; steps with prompt chunks count for
 * neither. The two regimes alternate until each has SD_REGIME_MIN blocks;
 * then the one with the higher rate (sums over blocks, both regimes' fading
 * by SD_REGIME_DECAY at each block of the load, whichever ran it: a
 * loser's figures are its old blocks', and when its own faded only with its
 * own blocks, the first, cold ones weighed on while the winner's stayed
 * fresh — at C = 16, T = 0, a core each, three early drafting blocks at
 * 2.56-2.91 tokens a ms held drafting below plain's 2.95-3.2 for 20
 * blocks, while its later blocks made 3.1-3.6) runs, and the other one
 * block in gap (4,
 * doubling to 32 while it keeps losing, back to 4 when the winner changes),
 * so that a change of load is noticed. While drafting's rate is
 * SD_REGIME_SKIP times plain's or more, no plain block runs: the test
 * would only cost. Plain's rate is always measured first (one block): the
 * step model's own price of plain steps once stood in for it until then,
 * and in one round of a C = 16, T = 0.8 benchmark it read drafting as 1.4×
 * plain while drafting made 1.9 tokens a ms against plain servers' 3.6–5.3,
 * so no plain block ever ran (docs/BENCHMARKS.md).
 * The verdict depends on the load, so the test keeps its figures apart by
 * the load a block starts with (sd_regime_key: the decoding requests — 1,
 * 2-5, 6-11, 12 or more — and whether any of them samples): a block starts
 * in the regime its load's figures choose, and a load seen before resumes
 * where it was.
 *
 * Pure (no I/O, no clock). */
#ifndef SD_REGIME_H
#define SD_REGIME_H

#include <stdbool.h>
#include <stdint.h>

#define SD_REGIME_WARM 2
#define SD_REGIME_STEPS 16
#define SD_REGIME_MIN 3
#define SD_REGIME_GAP_FIRST 4
#define SD_REGIME_GAP_MAX 32
#define SD_REGIME_DECAY 0.75
#define SD_REGIME_SKIP 1.4

#define SD_REGIME_KEYS 8

enum { SD_VF_DRAFTING = 0, SD_VF_PLAIN = 1 };

/* The same test compares the two protocols of a drafter on compute of its
 * own (--spec-pipeline auto, adapt.h sd_adapt_pipelines): pipelined blocks
 * in the first regime's place, serial ones in the second's. */
enum { SD_PIPE_PIPELINED = SD_VF_DRAFTING, SD_PIPE_SERIAL = SD_VF_PLAIN };

/* The test's figures for one load. */
typedef struct sd_regime_load {
    double tok[2], ms[2]; /* per regime, over its blocks (faded): tokens committed, ms taken */
    unsigned blocks[2];   /* blocks measured per regime */
    int winner;           /* the regime that won the last comparison (-1: none yet) */
    int gap, since;       /* the winner's blocks between two of the loser's; since its last */
} sd_regime_load;

typedef struct sd_regime {
    sd_regime_load load[SD_REGIME_KEYS];
    int key;                /* the load of the block running (-1: none yet) */
    bool open;              /* a block is running */
    int now;                /* the regime of the block running */
    int steps;              /* steps of the block so far */
    double blk_tok, blk_ms; /* the block's measured steps: tokens, ms taken */
    int blk_drafted;        /* ... and those of them with drafts chosen */
    uint64_t plain_steps;   /* steps run plain by the test */
} sd_regime;

void sd_regime_init(sd_regime *g);

/* The load of a step: decoding requests (n) and whether any samples. */
int sd_regime_key(int n, bool sampled);

/* Whether this step runs plain; key: its load (a block starting now takes
 * its regime from that load's figures). */
bool sd_regime_plain(sd_regime *g, int key);

/* A decode step of the test ran (not one with prompt chunks, nor one where
 * no request could draft): tokens it committed, cycle_ms the time it took
 * (<= 0: unknown — it is then not measured), drafted: drafts were chosen
 * for it.
 * Ends the block after its last step. A drafting block none of whose
 * measured steps drafted measures nothing: its steps were plain ones (the
 * step model chose no drafts), and their rate, taken for drafting's, once
 * kept plain blocks running for 110 steps after one slow spell (a CPU, 2
 * cores, 4 greedy requests: 1.95 tokens a ms in that block, 2.7 in the
 * plain ones beside it, 3.1-3.7 in drafting blocks that drafted). */
void sd_regime_note(sd_regime *g, double tokens, double cycle_ms, bool drafted);

/* Steps left in the drafting block running, this one included (0: none
 * running, or a plain one). */
int sd_regime_left(const sd_regime *g);

/* Figures measured elsewhere for a regime under load key — tokens
 * committed in ms — counted as one of its blocks: the in-process loop
 * (spec_run.h) seeds plain's from its calibrated step, since there no work
 * between steps makes a plain step dearer than the engine's (the reason the
 * server measures it), and a 128-token run once spent 18 of its 42 steps in
 * the plain block that measured it. */
void sd_regime_seed(sd_regime *g, int key, int regime, double tokens, double ms);

/* A regime's measured rate under the load of the block running (tokens
 * per ms; < 0: not measured). */
double sd_regime_rate(const sd_regime *g, int regime);

#endif
