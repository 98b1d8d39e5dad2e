/* slots.h: a compiled graph's per-slot arrays, stored by the slots a rank
 * fills (slots.c).
 *
 * A tensor has a handle per micro-batch or replica of the whole plan, a tiled
 * node one per micro-batch and tile, an all-reduce bucket one per replica, and
 * compile-time flags beside them; a rank fills the slots of its own share and
 * of its partners only. As dense arrays these cost 8 bytes per slot of the
 * plan on every rank (1,650 heap arrays of 4-8 KB and 841 mappings per rank
 * for ResNet-56 on 2,048 GPUs: the per-rank memory grew with the plan). A
 * hyfi_slots holds n slots: dense for a few (at most HYFI_SLOTS_DENSE), else
 * only the slots that were ever written, in a table from the slot's index to
 * a cell whose address stays put (the handle table and the registrations keep
 * pointers to cells). A slot never written reads NULL (a flag: 0).
 *
 * The type is opaque, so that no code indexes it as an array: read a slot with
 * hyfi_slot, take its cell with hyfi_slot_at. A flag array is a hyfi_slots
 * read with hyfi_flag / hyfi_flag_at (a cell's first byte). */
#ifndef HYFI_ENGINE_SLOTS_H
#define HYFI_ENGINE_SLOTS_H

#include <starpu.h>
#include <stddef.h>

#define HYFI_SLOTS_DENSE 64

typedef struct hyfi_slots hyfi_slots;

/* n slots, every one NULL (0); NULL when out of memory. *oom is set to 1 when
 * a cell cannot be made later (the compile's out-of-memory flag). */
hyfi_slots *hyfi_slots_new(size_t n, int *oom);
void hyfi_slots_free(hyfi_slots *s); /* NULL is fine */
size_t hyfi_slots_len(const hyfi_slots *s);
/* Slot i's handle: NULL when never set, when i is out of range, or when s is NULL. */
starpu_data_handle_t hyfi_slot(const hyfi_slots *s, size_t i);
/* Slot i's cell, made if needed (NULL, its value): its address is fixed until
 * hyfi_slots_free. NULL when out of memory or i out of range. */
starpu_data_handle_t *hyfi_slot_at(hyfi_slots *s, size_t i);
/* The flag in slot i (0 when never set), and its byte, made if needed (out
 * of memory: a byte of s's own, with *oom set, so that the compile fails). */
unsigned char hyfi_flag(const hyfi_slots *s, size_t i);
unsigned char *hyfi_flag_at(hyfi_slots *s, size_t i);
/* Every slot NULL (flags 0) again; the cells stay where they are. */
void hyfi_slots_zero(hyfi_slots *s);
/* Bytes held (for the per-rank statistics). */
size_t hyfi_slots_bytes(const hyfi_slots *s);

#endif
