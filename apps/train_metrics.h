/* hyfi-train's --metrics file and the figures of each step it records
 * (apps/train_metrics.c). Rank 0 writes JSON lines (line-buffered: a killed
 * run leaves whole lines; a resumed run appends):
 *   {"step":S,"loss":L,"images_per_sec":R,"grad_norm":G,"weight_norm":W,
 *    "train_accuracy":A}
 * one per training step, and at the end
 *   {"summary":true,"peak_memory_mb_rank0":M,"mean_images_per_sec":R,
 *    "median_images_per_sec":R,"test_accuracy":A}
 * (null where not applicable). train_accuracy is the top-1 accuracy of the
 * step's own batch, from the logits its forward made (no other pass). On
 * several ranks the lines also hold what differs between the ranks, one
 * entry per rank (index: the rank): "rank_images_per_sec" (each rank's own
 * clock over the step) and "rank_peak_memory_mb" (each rank's peak resident
 * memory so far) on the step lines, "peak_memory_mb_ranks" on the summary;
 * gathered from every rank at each step (one small exchange, only with
 * --metrics). scripts/plot_metrics.py draws them, one line per rank. */
#ifndef HYFI_APPS_TRAIN_METRICS_H
#define HYFI_APPS_TRAIN_METRICS_H

#include "train_run.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The top-1 accuracy of the step just run over its batch (labels: its B
 * labels), from the logits the step's forward left (every rank reads them:
 * call it on every rank). NAN where they cannot be read (a simulation, whose
 * kernels do not run). */
double step_accuracy(run *r, const int32_t *labels);

/* Step s's --metrics line (0-based; r->rates[s] set). On several ranks with
 * --metrics every rank calls it (the ranks' figures are gathered). 0, or 1
 * (the reason printed). */
int metrics_step(run *r, long long s, float l, double gnorm, double wnorm, double acc);

/* The summary line (this rank's peak memory: have, peak_mb). On several
 * ranks with --metrics every rank calls it. */
void metrics_summary(run *r, bool have_rss, double peak_mb);

/* Rank 0's metrics file: whether every write so far reached it (a full file
 * system, /dev/full); the message names the file and the error. */
hyfi_status metrics_status(run *r, char *msg, size_t len);

#endif
