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

/* The checkpoints to resume from, newest first: path itself when it is a
 * file, else every step-*.safetensors of the folder path, most steps first
 * (the caller takes the first one that is valid). 0 (*list: *n malloc'd
 * paths, freed with ckpt_candidates_free), or -1 with a message in err (no
 * such folder, no checkpoint in it). */
int ckpt_candidates(const char *path, char ***list, int *n, char *err, size_t errlen);
void ckpt_candidates_free(char **list, int n);
/* The steps in a checkpoint file's name, -1 for a file named otherwise. */
long long ckpt_name_step(const char *path);

/* Remove the oldest step-*.safetensors of dir beyond the keep newest (keep 0:
 * none). Returns how many were removed. */
int ckpt_prune(const char *dir, int keep);

/* SIGTERM and SIGINT: the first asks the run to stop after the current step
 * (stop_requested() returns its number from then on), a second ends the
 * process at once (exit status 128 + signal). */
void stop_signals_install(void);
int stop_requested(void);

#endif
