/* hyfi-train's checkpoint folder and stop signals (apps/checkpoints.c).
 *
 * A checkpoint folder holds step-NNNNNNNN.safetensors files (hyfi_save_checkpoint;
 * NNNNNNNN: the steps done, zero-padded to 8 digits or more), the newest being
 * the one with the most steps. Only these names are touched: pruning removes
 * the oldest beyond --keep and nothing else. */
#ifndef HYFI_APPS_CHECKPOINTS_H
#define HYFI_APPS_CHECKPOINTS_H

#include <stddef.h>

/* DIR/step-NNNNNNNN.safetensors of `step`. */
void ckpt_path(const char *dir, long long step, char *out, size_t len);

/* Create dir (and its parents) when missing and check that files can be
 * created in it. 0, or -1 with a message in err. */
int ckpt_prepare_dir(const char *dir, char *err, size_t errlen);

/* The checkpoint to resume from: path itself when it is a file, else the
 * newest step-*.safetensors in the folder path. 0 (out, *step: its steps from
 * the name; -1 for a file named otherwise), or -1 with a message in err (no
 * such folder, no checkpoint in it). */
int ckpt_find_newest(const char *path, char *out, size_t len, long long *step, char *err,
                     size_t errlen);

/* Remove the oldest step-*.safetensors of dir beyond the keep newest (keep 0:
 * none). Returns how many were removed. */
int ckpt_prune(const char *dir, int keep);

/* SIGTERM and SIGINT: the first asks the run to stop after the current step
 * (stop_requested() returns its number from then on), a second ends the
 * process at once (exit status 128 + signal). */
void stop_signals_install(void);
int stop_requested(void);

#endif
