/* memory.c - what SAPP says about memory after the partition (spec
 * sapp-search.md §3.7 DevicesMemoryControl, §5 auto_pipeline /
 * ParallelSuggestion).  Neither changes a strategy; the auto-pipeline
 * suggestion may change the number of pipeline stages the roll-back
 * (§3.6) returns to.
 */
#include <string.h>

#include "sapp.h"

/* ------------------------------------------------------------ §3.7 memory check */

/* MindSpore's GetDataTypeSize: float16 2, float32 4, double 8, and int8 8
 * bytes (a bug kept as spec, §3.7 and §8.4).  MindSpore's parser stores
 * float32 for every tensor (§1.3), so it never meets another type; sappc
 * reads the dump's element type, and types MindSpore has no case for take
 * their real size. */
static double mc_elt_size(Sym dtype)
{
	const char *s = dtype ? sym_str(dtype) : "Float32";
	if (strcmp(s, "Float16") == 0)
		return 2;
	if (strcmp(s, "Float32") == 0)
		return 4;
	if (strcmp(s, "Float64") == 0)
		return 8;
	if (strcmp(s, "Int8") == 0)
		return 8;
	return dtype_size(dtype);
}

static Sym input_dtype(const Sapp *S, const SappOp *X, uint32_t i)
{
	if (X->n) {
		const Node *n = X->src;
		uint32_t a = X->arg[i];
		if (a < n->nin_types)
			return n->in_types[a].dtype;
		if (a < n->nargs && n->args[a].kind == V_NODE && n->args[a].u.node)
			return n->args[a].u.node->out.dtype;
		return 0;
	}
	if (S->getnext)
		return S->getnext->out.dtype;
	const Graph *g = ir_entry(S->m);
	return g && X->arg[i] < g->params.n ? g->params.a[X->arg[i]]->out.dtype : 0;
}

static void human(char *buf, size_t n, double bytes)
{
	const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	int i = 0;
	while (bytes >= 1024 && i < 5) {
		bytes /= 1024;
		i++;
	}
	snprintf(buf, n, i ? "%.2f %s" : "%.0f %s", bytes, u[i]);
}

/* DevicesMemoryControl: over the kept operators the search partitioned
 * (not the pinned ones), the per-device size of their first two inputs
 * times the element size, summed; MindSpore warns when the device memory is
 * below that sum divided by the device count -- although the sizes are
 * already per device [quirk kept, §3.7; §8 does not advise otherwise].
 * Called on the whole partition, before the pipeline roll-back, with the
 * total device count, where MindSpore's PartitionForAllDevices runs it.
 * The warning points at the first such operator (else the entry graph). */
double sapp_memory_check(Sapp *S)
{
	double sum = 0;
	const Node *first = NULL;
	for (uint32_t k = 0; k < S->nkept; k++) {
		const PartNode *R = &S->part[k];
		const SappOp *X = &S->ops[R->rec];
		if (R->pinned)
			continue;
		if (!first && X->n)
			first = X->n;
		for (uint32_t i = 0; i < 2 && i < R->nargs && i < X->nin; i++) {
			double e = 1;
			for (int d = 0; d < 4; d++)
				e *= (double)R->arg[i].d[d] / (double)R->acut[i].d[d];
			sum += e * mc_elt_size(input_dtype(S, X, i));
		}
	}
	double est = sum / (double)S->devices;
	char a[32], b[32];
	human(a, sizeof a, est);
	human(b, sizeof b, S->o->device_memory);
	if (S->explain >= 0)
		fprintf(stderr,
		        "sapp: explain: memory check: the searched operators' first two inputs take %s per device "
		        "(summed, divided by the %lld devices once more as MindSpore does); device memory %s\n",
		        a, (long long)S->devices, b);
	if (S->o->device_memory < est) {
		const Graph *g = ir_entry(S->m);
		Loc loc = first ? first->loc : g ? g->loc : (Loc){0, 0};
		diag_warning_at(
		    loc,
		    "the strategies may collapse due to out of memory: SAPP's estimate is %s per device, the "
		    "device memory %s (--device-memory)",
		    a, b);
	}
	return est;
}

/* ------------------------------------------------------------ §5 the model */

/* the layer index of a parameter name: the number after a "layers",
 * "layer" or "blocks" part (model.layers.3.attention.wq.weight,
 * backbone.blocks.3.attention.dense1.weight); -1 if none */
static int64_t layer_index(const char *name)
{
	static const char *const cell[] = {"layers.", "layer.", "blocks."};
	for (const char *p = name; *p; p++) {
		if (p != name && p[-1] != '.')
			continue;
		for (size_t c = 0; c < sizeof cell / sizeof cell[0]; c++) {
			size_t l = strlen(cell[c]);
			if (strncmp(p, cell[c], l) != 0 || p[l] < '0' || p[l] > '9')
				continue;
			int64_t v = 0;
			const char *q = p + l;
			while (*q >= '0' && *q <= '9' && v < 1000000)
				v = v * 10 + (*q++ - '0');
			if (*q == '.' || *q == 0)
				return v;
		}
	}
	return -1;
}

static int is_embedding(const char *name)
{
	return strstr(name, "tok_embeddings") || strstr(name, "word_embedding") || strstr(name, "embed_tokens");
}

/* The transformer the parameter names describe (§5; the spec names the
 * patterns but not the exact rules, so these are sappc's):
 *   layers  - distinct layer indices (layer_index above);
 *   hidden  - dimension 1 of the embedding table (tok_embeddings,
 *             word_embedding, embed_tokens), else the larger dimension of
 *             the first 2-D "attention" weight;
 *   batch, seq - dimensions 0 and 1 of the first graph input of rank >= 2
 *             (MindSpore reads the GetNext output);
 *   heads   - dimension 1 of the first 4-D Softmax input (b, heads, s, s);
 *             none (FlashAttention, or no attention scores): 0, and the
 *             activation estimate has no score term;
 *   parameters - every weight's bytes, inside the layers or outside;
 *   act_elt - the element size of the embedding table (the activations'
 *             type), else of the first MatMul's input;
 *   dp, mp  - the most frequent (rows of A, cuts of B) pair of the kept
 *             MatMuls at the rolled-back level (ties: the first seen).
 * 0 with the reason in why when the graph does not look like one. */
int sapp_read_model(const Sapp *S, SappModel *M, char *why, size_t n)
{
	memset(M, 0, sizeof *M);
	const Graph *g = ir_entry(S->m);
	if (!g) {
		snprintf(why, n, "no entry graph");
		return 0;
	}
	uint8_t *seen = xcalloc(1024, 1);
	Sym emb_dtype = 0, att_dtype = 0;
	int64_t att_hidden = 0;
	for (uint32_t i = 0; i < g->params.n; i++) {
		const Node *p = g->params.a[i];
		if (!p->has_default || p->out.shape.kind != SK_DIMS)
			continue;
		const char *name = sym_str(p->name);
		int64_t ne;
		if (shape_numel(&p->out.shape, &ne) != 0)
			continue;
		double bytes = (double)ne * dtype_size(p->out.dtype);
		int64_t li = layer_index(name);
		if (li >= 0) {
			M->layer_bytes += bytes;
			if (li < 1024 * 8 && !(seen[li / 8] & (1u << (li % 8)))) {
				seen[li / 8] |= (uint8_t)(1u << (li % 8));
				M->layers++;
			}
		} else {
			M->other_bytes += bytes;
		}
		const int64_t *d = p->out.shape.dims;
		if (p->out.shape.rank == 2 && is_embedding(name) && !M->hidden) {
			M->hidden = d[1];
			emb_dtype = p->out.dtype;
		}
		if (p->out.shape.rank == 2 && strstr(name, "attention") && !att_hidden) {
			att_hidden = d[0] > d[1] ? d[0] : d[1];
			att_dtype = p->out.dtype;
		}
	}
	free(seen);
	if (!M->hidden) {
		M->hidden = att_hidden;
		emb_dtype = att_dtype;
	}
	if (!M->layers || !M->hidden) {
		snprintf(why, n,
		         "no transformer layers (weights named like model.layers.N.attention.wq.weight and an "
		         "embedding table tok_embeddings or word_embedding)");
		return 0;
	}
	const SappOp *V = S->vd >= 0 ? &S->ops[S->vd] : NULL;
	for (uint32_t i = 0; V && i < V->nin && !M->seq; i++)
		if (V->rank[i] >= 2) {
			M->batch = V->dims[i][0];
			M->seq = V->dims[i][1];
		}
	if (!M->seq) {
		snprintf(why, n, "no graph input of rank 2 or more for the batch and sequence length");
		return 0;
	}
	/* the heads, and the MatMuls' (dp, mp) */
	uint32_t cap = S->nkept + 1, npairs = 0;
	int64_t *pd = xmalloc(cap * sizeof *pd), *pm = xmalloc(cap * sizeof *pm);
	uint32_t *cnt = xcalloc(cap, sizeof *cnt);
	for (uint32_t x = 0; x < S->nops && !M->heads; x++) {
		const SappOp *X = &S->ops[x];
		if (X->n && op_table[X->n->op].family == FAM_SOFTMAX && X->nin && X->rank[0] == 4)
			M->heads = X->dims[0][1];
	}
	for (uint32_t k = 0; k < S->nkept; k++) {
		const PartNode *R = &S->part[k];
		if (R->type != REC_MatMul || R->nargs < 2)
			continue;
		if (!M->act_elt && !emb_dtype)
			M->act_elt = dtype_size(input_dtype(S, &S->ops[R->rec], 0));
		/* the cuts at the level --pipeline-stages rolls back to */
		const Dim4 *a = S->rollback > 0 ? &S->snap[3 * k] : &R->acut[0];
		const Dim4 *b = S->rollback > 0 ? &S->snap[3 * k + 1] : &R->acut[1];
		int64_t dp = a->d[2], mp = b->d[2] * b->d[3];
		uint32_t j = 0;
		while (j < npairs && (pd[j] != dp || pm[j] != mp))
			j++;
		if (j == npairs) {
			pd[j] = dp;
			pm[j] = mp;
			npairs++;
		}
		cnt[j]++;
	}
	uint32_t best = 0;
	for (uint32_t j = 1; j < npairs; j++)
		if (cnt[j] > cnt[best])
			best = j;
	if (npairs) {
		M->dp = pd[best];
		M->mp = pm[best];
	}
	free(pd);
	free(pm);
	free(cnt);
	if (!npairs) {
		snprintf(why, n, "no MatMul to read the data and model parallel degrees from");
		return 0;
	}
	if (emb_dtype)
		M->act_elt = dtype_size(emb_dtype);
	if (!(M->act_elt > 0))
		M->act_elt = 2;
	return 1;
}

/* ------------------------------------------------------------ §5 the estimate */

/* Memory per device of one pipeline stage (the spec gives the terms, §5,
 * not the formulas; these are sappc's, in bytes):
 *   static  = 4 copies of the stage's parameters (weights, accumulated
 *             gradients, 2 optimizer states) in the weights' own types,
 *             divided by dp*mp with optimizer parallel, else by mp; a stage
 *             holds ceil(layers / stages) layers and, in the worst case,
 *             every weight outside the layers (embedding, head, norms);
 *   dynamic = activations under full recomputation, Megatron-LM's terms for
 *             sequence s, micro-batch b = batch / (dp * micro-batches) and
 *             hidden h, in 16-bit bytes scaled to the activation type:
 *             n_checkpoints = layers of the stage / 1.5 stored layer inputs
 *             of 2sbh, one layer recomputed at a time, sbh (10 + 24/t +
 *             5 a s / (h t)) with t = mp and a heads, and a communication
 *             buffer of 8 sbh (t-1)/t per layer of the stage. */
void sapp_model_memory(const SappModel *M, int64_t stages, int64_t dp, int64_t mp, int64_t micro, int opt_shard,
                       double *stat, double *dyn)
{
	if (stages < 1)
		stages = 1;
	if (dp < 1)
		dp = 1;
	if (mp < 1)
		mp = 1;
	int64_t ls = (M->layers + stages - 1) / stages;
	double params = M->other_bytes + M->layer_bytes * (double)ls / (double)M->layers;
	*stat = 4.0 * params / (double)(opt_shard ? dp * mp : mp);
	double mb = stages > 1 && micro > 1 ? (double)micro : 1.0;
	double b = (double)M->batch / ((double)dp * mb);
	if (b < 1)
		b = 1;
	double h = (double)M->hidden, s = (double)M->seq, t = (double)mp;
	double sbh = s * b * h;
	double ckpt = (double)ls / 1.5 * 2.0 * sbh;
	double layer = sbh * (10.0 + 24.0 / t + (M->heads ? 5.0 * (double)M->heads * s / (h * t) : 0.0));
	double comm = (double)ls * 8.0 * sbh * (t - 1.0) / t;
	*dyn = (ckpt + layer + comm) * M->act_elt / 2.0;
}

static int fits(double stat, double dyn, double capacity)
{
	return 1.1 * (stat + dyn) < capacity;
}

/* ParallelSuggestion (§5): the configured stage number first; when it
 * fits (1.1 x memory < capacity), halve the stage number while the halved
 * one still fits, doubling dp or mp each time (the one that has grown less
 * so far, which keeps their ratio; mp on a tie, since it divides the
 * weights and the search is after memory).  Fewer stages, fewer
 * pipeline bubbles.  Halving stops at an odd stage number: the roll-back
 * can only return to a power-of-two stage count (§3.6).  When the
 * configured number does not fit, the advice is mem_coeff 1024 and batch
 * 1, stage number unchanged. */
void sapp_suggest(const SappModel *M, int64_t stages, int64_t micro, int opt_shard, double capacity, double mem_coef,
                  SappSuggest *r)
{
	memset(r, 0, sizeof *r);
	r->stages = stages;
	r->dp = M->dp;
	r->mp = M->mp;
	sapp_model_memory(M, stages, M->dp, M->mp, micro, opt_shard, &r->stat0, &r->dyn0);
	r->stat = r->stat0;
	r->dyn = r->dyn0;
	if (!fits(r->stat, r->dyn, capacity)) {
		r->mem_coef = 1024;
		r->batch = 1;
		r->micro = 1;
		return;
	}
	r->fits = 1;
	r->mem_coef = mem_coef;
	r->batch = M->batch;
	while (r->stages > 1 && (r->stages & (r->stages - 1)) == 0) {
		int64_t dp = r->dp, mp = r->mp;
		if (mp * M->dp <= dp * M->mp)
			mp *= 2;
		else
			dp *= 2;
		double st, dy;
		sapp_model_memory(M, r->stages / 2, dp, mp, micro, opt_shard, &st, &dy);
		if (!fits(st, dy, capacity))
			break;
		r->stages /= 2;
		r->dp = dp;
		r->mp = mp;
		r->stat = st;
		r->dyn = dy;
	}
	r->micro = r->stages > 1 ? micro : 1;
}

/* After the partition, before the roll-back: the estimate and the
 * suggestion of a training graph that looks like a transformer, printed
 * as a note when --auto-pipeline is on or the configured stage number does
 * not fit; with --auto-pipeline the suggested stage number is returned. */
int64_t sapp_auto_pipeline(Sapp *S, const char **line)
{
	const Options *o = S->o;
	*line = NULL;
	if (S->predict) {
		if (o->auto_pipeline)
			diag_note("auto pipeline: the memory model is a training one and this graph is planned for "
			          "inference; %lld pipeline stage%s kept",
			          (long long)S->stages, S->stages == 1 ? "" : "s");
		return S->stages;
	}
	SappModel M;
	char why[256];
	if (!sapp_read_model(S, &M, why, sizeof why)) {
		if (o->auto_pipeline)
			diag_note("auto pipeline: no memory estimate: %s; %lld pipeline stage%s kept", why,
			          (long long)S->stages, S->stages == 1 ? "" : "s");
		return S->stages;
	}
	int64_t micro = o->micro_batch_num > 0 ? o->micro_batch_num : 1;
	SappSuggest r;
	sapp_suggest(&M, S->stages, micro, o->enable_parallel_optimizer, o->device_memory, o->mem_coef, &r);
	char a[32], b[32], c[32], d[32];
	human(a, sizeof a, r.stat0 + r.dyn0);
	human(b, sizeof b, r.stat0);
	human(c, sizeof c, r.dyn0);
	human(d, sizeof d, o->device_memory);
	char text[640];
	int k = snprintf(
	    text, sizeof text,
	    "%lld layer%s, hidden %lld, sequence %lld, batch %lld: %lld stage%s with dp %lld, mp %lld need %s "
	    "per device (%s parameters, gradients and optimizer states, %s activations) of %s; ",
	    (long long)M.layers, M.layers == 1 ? "" : "s", (long long)M.hidden, (long long)M.seq, (long long)M.batch,
	    (long long)S->stages, S->stages == 1 ? "" : "s", (long long)M.dp, (long long)M.mp, a, b, c, d);
	human(a, sizeof a, r.stat + r.dyn);
	if (k > 0 && (size_t)k < sizeof text) {
		if (r.fits)
			snprintf(text + k, sizeof text - (size_t)k,
			         "suggestion: mem_coeff %g, pipeline_stage %lld, batch %lld, micro-batches %lld (%s "
			         "per device "
			         "with dp %lld, mp %lld)",
			         r.mem_coef, (long long)r.stages, (long long)r.batch, (long long)r.micro, a,
			         (long long)r.dp, (long long)r.mp);
		else
			snprintf(text + k, sizeof text - (size_t)k,
			         "nothing fits; suggestion: mem_coeff %g, pipeline_stage %lld, batch %lld, "
			         "micro-batches %lld",
			         r.mem_coef, (long long)r.stages, (long long)r.batch, (long long)r.micro);
	}
	int64_t applied = o->auto_pipeline && r.fits ? r.stages : S->stages;
	size_t len = strlen(text);
	if (applied != S->stages)
		snprintf(text + len, sizeof text - len, "; applied (--auto-pipeline)");
	*line = arena_strndup(S->m->arena, text, strlen(text));
	if (o->auto_pipeline || !r.fits)
		diag_note("auto pipeline: %s", text);
	return applied;
}
