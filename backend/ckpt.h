/* ckpt.h - MindSpore's strategy checkpoint and group checkpoint files
 * (shared/spec/training-step.md §7): the plan in the form
 * strategy_ckpt_save_file writes and strategy_ckpt_load_file reads, binary
 * protobuf (backend/node_strategy.proto) or JSON, and the communication
 * groups of one rank in the form of group_ckpt_save_file. */
#ifndef SAPPC_CKPT_H
#define SAPPC_CKPT_H

#include "sappc.h"

/* the forms of a strategy file */
typedef enum { CKPT_SAPPC, CKPT_MINDSPORE, CKPT_MINDSPORE_JSON } CkptFormat;

/* --strategy-format's word -> format, -1 unknown */
int ckpt_format_named(const char *word);
/* the format a --strategy-out file name implies when --strategy-format is
 * not given: .ckpt or .pb is MindSpore's protobuf, anything else sappc's JSON */
CkptFormat ckpt_format_of_name(const char *path);
/* the format of a file's contents: JSON with "parallel_strategy_item" is
 * MindSpore's JSON, other JSON sappc's own, anything else protobuf */
CkptFormat ckpt_format_of_text(const char *buf, size_t len);

/* One operator strategy of a MindSpore file: its key, stage and one shard
 * count list per input (s[off[i] .. off[i] + len[i])). */
typedef struct CkptItem {
	const char *key;
	uint32_t stage;
	uint32_t nstra;
	uint32_t *off, *len;
	int64_t *s;
} CkptItem;

typedef struct CkptPlan {
	uint32_t current_stage;
	CkptItem *items; /* in file order */
	uint32_t nitems;
	uint32_t nlayouts; /* parameter layouts the file holds (checked, not applied) */
	Arena *arena;      /* everything above */
} CkptPlan;

/* Read a MindSpore strategy file (either form, by contents) from buf.
 * 0 ok; 1 when it is malformed, reported as "path: error: ..." (truncated
 * protobuf, a missing required field, a JSON key of the wrong type). */
int ckpt_read(const char *path, const char *buf, size_t len, CkptPlan *p);
void ckpt_plan_free(CkptPlan *p);

/* MindSpore's key of an operator: "<primitive>_<first weight it reads>",
 * looking through Load, Cast, Depend, AllGather and the mirror operators
 * (and nodes the lowering inserted); 0 when it reads no weight. */
int ckpt_key(const Node *n, char *buf, size_t len);

/* Write the plan of a module that has run the pipeline (the rank's stage
 * after lowering), as strategy_ckpt_save_file would: 0 ok, 1 when the
 * weights have no layouts (the pipeline stopped before `layouts`), 3 I/O. */
int ckpt_write(Module *m, const Options *o, const char *path, CkptFormat fmt);
/* Write the rank's communication groups as group_ckpt_save_file would. */
int ckpt_write_groups(Module *m, const Options *o, const char *path);

#endif
