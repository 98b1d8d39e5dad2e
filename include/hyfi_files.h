/* hyfi_files.h: the calls of hyfi.h that look at a run and keep its results:
 * traces, task records, inspection of a compiled graph, checkpoints and model
 * files. Part of hyfi.h, which includes it at its end: include <hyfi.h>, not
 * this file. */
#ifndef HYFI_FILES_H
#define HYFI_FILES_H

#ifndef HYFI_H
#error "include <hyfi.h>: hyfi_files.h is a part of it"
#endif

/* --------------------------------------------------------------- versions */
/* The versions of hyfi and of the libraries this build of it uses, one line
 * each ("NAME VERSION", details in parentheses), for a program's --version
 * and for bug reports: hyfi (hyfi_version()); StarPU (the loaded library's,
 * and the one compiled against where they differ); oneDNN (not in a
 * simulation build); in a CUDA build the CUDA runtime and cuDNN compiled
 * against (and the loaded ones where they differ) and the CUDA driver's
 * version, or that none was found (a machine without a GPU is not an error);
 * else a line saying the build has no CUDA. Starts nothing (no context, no
 * MPI, no CUDA context), so it may be called first, before or without
 * hyfi_ctx_create. Writes at most len bytes into buf (NUL-terminated when len
 * > 0; buf may be NULL with len 0) and returns the length of the whole text,
 * as snprintf does. */
size_t hyfi_versions(char *buf, size_t len);

/* ----------------------------------------------------------------- traces */
/* After a traced run (hyfi_ctx_config.trace_dir) and hyfi_ctx_destroy, on one
 * process (rank 0): merge the ranks' FxT files with StarPU's starpu_fxt_tool
 * into dir (paje.trace for ViTE, tasks.rec, comms.rec, data.rec, dag.dot,
 * trace.html). nranks: the run's MPI size. */
hyfi_status hyfi_trace_merge(const char *dir, int nranks);
/* Read a merged trace and write dir/summary.json and dir/timeline.svg; print
 * the summary to out (may be NULL). The summary: per rank and worker the busy
 * and idle time, compute time by op kind, per place (replica, stage, tile);
 * transfers between ranks (count, bytes, time) split into halo, batch-norm
 * statistics of tiles, pipeline (activations and gradients between stages
 * and places), all-reduce (gradients, running statistics) and other, and how
 * much of their time the receiving rank computed meanwhile; the steps (task
 * programs) found and the critical path of the last one. The picture: the
 * last steps (up to 4), one lane per worker per rank, tasks coloured by kind
 * and labelled by op, tile and micro-batch; under each rank's workers a row
 * per traffic category marks when transfers into the rank were in flight. */
hyfi_status hyfi_trace_summarize(const char *dir, FILE *out);
/* A traced context (hyfi_ctx_config.trace_dir): pause (on false) or resume (on
 * true) StarPU's recording on this rank, e.g. around a window of training
 * steps (between hyfi calls: every task of a step has ended when it returns).
 * While paused only StarPU's own bookkeeping events are kept; a resume
 * records hyfi_ctx_config.trace_events (all when NULL). Each rank calls it
 * for itself, at the same steps. HYFI_ERR_ARG: the context is not traced. */
hyfi_status hyfi_ctx_trace_record(hyfi_ctx *ctx, bool on);
/* A traced context: the programs run from now on are numbered on from
 * `steps` (the next is step steps + 1 in the summary, the picture and
 * summary.json's step_numbers), as if `steps` training steps had run in it:
 * a run resumed from a checkpoint after `steps` steps calls it before its
 * first step, so that its steps keep their numbers. Each rank calls it alike.
 * HYFI_ERR_ARG: the context is not traced, or steps < 0. */
hyfi_status hyfi_ctx_trace_steps_done(hyfi_ctx *ctx, long long steps);

/* ----------------------------------------------------------- task records */
/* With records on, every hyfi task this rank runs leaves a record when it
 * ends: its name (op.pass[.tile][.mb], e.g. "s1.b0.conv1.bwd_weight.mb2" or
 * "fc.weight.allreduce.rs0.r1.c0"), the StarPU worker and its start and end
 * on StarPU's clock (microseconds, one clock per process). Turning them on
 * enables StarPU's task profiling and costs a callback per task; off, nothing
 * (the default). Switching on clears the records. */
typedef struct hyfi_task_record {
    char name[64];
    int worker;
    double start_us, end_us;
} hyfi_task_record;
hyfi_status hyfi_ctx_set_task_records(hyfi_ctx *ctx, bool on);
/* Copy up to cap records (in completion order) to out (may be NULL with cap
 * 0); returns how many there are. */
size_t hyfi_ctx_task_records(const hyfi_ctx *ctx, hyfi_task_record *out, size_t cap);

/* Bytes this rank has sent to each rank so far (StarPU-MPI's statistics);
 * sent[] has nranks entries. All zero without MPI. */
hyfi_status hyfi_ctx_comm_bytes(const hyfi_ctx *ctx, size_t *sent, int nranks);

/* ------------------------------------------------------------- inspection */
hyfi_tensor *hyfi_tensor_find(hyfi_graph *g, const char *name);
const char *hyfi_tensor_name(const hyfi_tensor *t);
/* dims[0..3] = N, C, H, W (labels: N, 1, 1, 1). */
void hyfi_tensor_shape(const hyfi_tensor *t, int dims[4]);
size_t hyfi_tensor_numel(const hyfi_tensor *t);
bool hyfi_tensor_is_param(const hyfi_tensor *t);

/* Copy a tensor's current values out (parameters, running statistics,
 * activations after hyfi_forward / hyfi_infer, and after hyfi_train_step when
 * the plan is one stage and one micro-batch: other plans release activations as
 * soon as their backward is done). The logits the loss reads are kept in every
 * plan: after hyfi_train_step they are that step's (its batch's accuracy
 * without another forward). count must equal its number of elements.
 * On CPU-only contexts a batch norm whose output only a ReLU reads runs with
 * that ReLU as one task, and its own output (and gradient) is not made:
 * HYFI_ERR_STATE; read the ReLU's output, or set hyfi_plan_config.no_fuse_bn_relu
 * to keep both (and alike a convolution's output that the residual add after it
 * is fused into: no_fuse_conv_add). */
hyfi_status hyfi_tensor_read(hyfi_graph *g, const hyfi_tensor *t, float *out, size_t count);
/* Gradient of the loss with respect to t after the last hyfi_train_step
 * (parameters and activations). */
hyfi_status hyfi_grad_read(hyfi_graph *g, const hyfi_tensor *t, float *out, size_t count);
/* Overwrite a parameter or state tensor (after compile). */
hyfi_status hyfi_tensor_write(hyfi_graph *g, hyfi_tensor *t, const float *data, size_t count);

/* Parameters (trainable) in creation order; state tensors (running statistics)
 * are not among them. */
int hyfi_param_count(const hyfi_graph *g);
hyfi_tensor *hyfi_param(hyfi_graph *g, int i);
/* Total number of trainable values. */
size_t hyfi_param_numel(const hyfi_graph *g);

/* One op of the graph, for summaries (--dry-run) and cost-based partitioning.
 * Valid before and after compile. */
typedef struct hyfi_op_info {
    const char *name;     /* the op's (and its output tensor's) name */
    const char *kind;     /* "conv2d", "batchnorm", "relu", ... */
    int out_dims[4];      /* output N, C, H, W */
    size_t params;        /* trainable values owned by the op */
    double flops;         /* forward floating-point operations for the whole batch
                             (multiply-add = 2); the backward costs about twice that */
    size_t act_bytes;     /* bytes of the output activation (float32) */
    int layer;            /* the op's layer (hyfi_layer_begin) and its name */
    const char *layer_name;
    int stage;            /* the stage of the plan (after compile; 0 before) */
    int out_blk;          /* after compile: the output's layout between tasks, 0 NCHW or
                             the channel block of oneDNN's nChw8c / nChw16c (CPU-only
                             runs; hyfi_plan_config.plain_layouts keeps NCHW). Reads
                             return NCHW. */
} hyfi_op_info;
int hyfi_graph_op_count(const hyfi_graph *g);
hyfi_status hyfi_graph_op_info(const hyfi_graph *g, int i, hyfi_op_info *info);

/* Save every parameter and state tensor (name, shape, values) to `path`,
 * atomically: the new file is written and fsync'ed beside the target (as an
 * unnamed file where the file system allows, so that a crash leaves nothing
 * behind), renamed over it, and the folder fsync'ed. A symbolic link is
 * written through (its target is replaced, the link stays); a path that is a
 * device, fifo, socket or folder is refused. */
hyfi_status hyfi_save_params(hyfi_graph *g, const char *path);
/* Load a file written by hyfi_save_params into a compiled graph with the same
 * tensors. The checksum over the whole file is checked first (a damaged or
 * truncated file, or one with bytes after its checksum, is refused as such),
 * then names and shapes must match (the error says which does not). Nothing
 * is applied unless everything checks. */
hyfi_status hyfi_load_params(hyfi_graph *g, const char *path);

/* ------------------------------------------------- checkpoints and export */
/* Checkpoints and exported models are safetensors files (a little-endian
 * u64 header length, a JSON header naming each tensor's dtype, shape and byte
 * range, then the raw tensors), written atomically as hyfi_save_params does,
 * with a 64-bit FNV-1a checksum over the whole file in the header's metadata
 * ("hyfi.checksum"); a file that carries one is checked before anything in it
 * is used. Every call is collective in MPI runs (the same status everywhere).
 * Files are logical: they hold each tensor once (replica 0's), whatever the
 * plan, so a checkpoint written under one plan resumes under any other. */

/* Application state stored with a checkpoint: up to HYFI_CHECKPOINT_META
 * key/value strings (keys up to 63 characters of [A-Za-z0-9_.-], values up to
 * 255 bytes of text), e.g. the step, the epoch, the learning-rate schedule
 * position and the data-order seed. */
#define HYFI_CHECKPOINT_META 32
typedef struct hyfi_checkpoint_meta {
    int n;
    struct {
        char key[64];
        char value[256];
    } entry[HYFI_CHECKPOINT_META];
} hyfi_checkpoint_meta;
/* Set (add or replace) / get (NULL: absent) an entry. Set returns
 * HYFI_ERR_ARG for a bad key, a value too long, or a full table. */
hyfi_status hyfi_checkpoint_meta_set(hyfi_checkpoint_meta *m, const char *key, const char *value);
const char *hyfi_checkpoint_meta_get(const hyfi_checkpoint_meta *m, const char *key);

/* The whole training state: parameters, momentum buffers, running statistics
 * (hyfi names), the learning rate, momentum and weight decay in force, and
 * meta (may be NULL). Loading requires the same tensors (names and shapes:
 * the error names the first that differs), restores all of it (the learning
 * rate included) into every replica of the current plan, and fills *meta (may
 * be NULL). A model file without momentum buffers is refused: use
 * hyfi_load_safetensors for it. */
hyfi_status hyfi_save_checkpoint(hyfi_graph *g, const char *path, const hyfi_checkpoint_meta *meta);
hyfi_status hyfi_load_checkpoint(hyfi_graph *g, const char *path, hyfi_checkpoint_meta *meta);
/* A checkpoint's settings without a graph, before one is built (e.g. the image
 * size and learning rate a run resumes with): the file is read and its
 * checksum checked (a damaged or truncated file is refused as such, so a
 * caller can fall back to an older one), *meta (may be NULL) gets the
 * application's entries and *tc (may be NULL) the learning rate, momentum and
 * weight decay in force when it was written. Reads only: not collective. */
hyfi_status hyfi_checkpoint_peek(const char *path, hyfi_checkpoint_meta *meta,
                                 hyfi_train_config *tc);

/* A model for other frameworks: parameters and running statistics as F32 (or
 * BF16: bf16 below),
 * each under the name rename gives it (NULL: the hyfi name), in PyTorch's
 * shapes (convolution weights (O, I, kh, kw), fully connected weights
 * (out, in), everything else 1-D), and for every batch norm an int64 scalar
 * "<prefix>.num_batches_tracked" beside its running mean (PyTorch's
 * BatchNorm2d keeps one; its value is num_batches_tracked below). */
typedef struct hyfi_export_options {
    /* Write the file name of hyfi tensor `name` into out (len bytes) and
     * return 0, or return 1 to leave the tensor out of the file (saving) or
     * not expect it there (loading). */
    int (*rename)(const char *name, char *out, size_t len, void *user);
    void *user;
    int64_t num_batches_tracked;
    int bf16; /* saving: 1 writes the parameters and running statistics as BF16
                 (rounded to nearest even, as PyTorch's model.to(torch.bfloat16)
                 stores them); 0: F32 */
} hyfi_export_options;
hyfi_status hyfi_save_safetensors(hyfi_graph *g, const char *path, const hyfi_export_options *opt);
/* Load parameters and running statistics from a safetensors file (ours, or
 * one written by safetensors.torch.save_file): each tensor is looked up under
 * its renamed name, then under its hyfi name; F32, F64, F16 and BF16 are
 * converted to float; shapes must hold the same number of values as the
 * tensor, in PyTorch's shape or hyfi's. num_batches_tracked entries are
 * ignored; any other tensor of the file that the graph does not have, and any
 * tensor of the graph missing from the file, is an error naming it (like
 * PyTorch's strict load_state_dict). Momentum buffers restart at zero. */
hyfi_status hyfi_load_safetensors(hyfi_graph *g, const char *path, const hyfi_export_options *opt);

#endif
