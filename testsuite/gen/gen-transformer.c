/*
 * gen-transformer.c -- write an L-layer LLaMA-style transformer training graph
 * in the sappc canonical IR text format (newest MindSpore dump style, see
 * notes/FORMAT.md).  Standalone C11, libc only.  Used by tests and benchmarks.
 *
 *   gen-transformer [-L layers] [-b batch] [-s seq] [-H hidden] [-n heads]
 *                   [-f ffn] [-v vocab] [-a bmm|fa-bsh|fa-bnsd] [--seed S] [-o FILE]
 *
 * Defaults: L=2 b=8 s=512 H=1024 n=16 f=4*H v=32000 seed=0, output on stdout.
 * The feed-forward width defaults to 4*H (not the LLaMA 2816-style rounding)
 * so that every dimension divides evenly by powers of two.
 *
 * Graph (one subgraph @main, T = b*s, d = H/n, F = ffn):
 *   Load(emb) ; Gather(emb, tokens, I64(0)) -> (b,s,H) ; Reshape -> (T,H)
 *   per layer (34 CNodes):
 *     Load, RmsNorm(x, w, F32(1e-06))
 *     3 x { Load, MatMul(transpose_b) }                 Q, K, V  (T,H)
 *     3 x { Reshape (b,s,n,d), Transpose (0,2,1,3) }     (b,n,s,d)
 *     BatchMatMul(Q, K, transpose_b) (b,n,s,s) ; Mul(., Tensor scale)
 *     Softmax(axis (-1)) ; BatchMatMul(P, V) (b,n,s,d)
 *     Transpose (0,2,1,3) ; Reshape (T,H) ; Load, MatMul (wo) ; Add (residual)
 *     Load, RmsNorm ; Load, MatMul (w1) ; SiLU ; Load, MatMul (w3) ; Mul
 *     Load, MatMul (w2) ; Add (residual)
 *   Load, RmsNorm (norm_out) ; Load, MatMul (lm_head) -> (T,v)
 *   SparseSoftmaxCrossEntropyWithLogits(logits, labels) -> () ; Return
 *
 * -a fa-bsh / fa-bnsd write the MindFormers form of the layer instead: the
 * fused FlashAttentionScore (input layout BSH or BNSD) with a causal-style
 * Bool mask input (b, 1, s, s), RotaryPositionEmbedding on q and k (cos/sin
 * inputs (1, s, 1, d) for BSH, (1, 1, s, d) for BNSD) and a SwiGLU
 * feed-forward (one (2F, H) gate+up weight, Swiglu, w2):
 *     Load, RmsNorm ; 3 x { Load, MatMul }
 *     BSH:  q, k: Reshape (b,s,n,d), RoPE, Reshape (b,s,H) ; v: Reshape (b,s,H)
 *     BNSD: q, k: Reshape, Transpose (0,2,1,3), RoPE ; v: Reshape, Transpose
 *     FlashAttentionScore ; TupleGetItem 3 ; [BNSD: Transpose] ; Reshape (T,H)
 *     Load, MatMul (wo) ; Add ; Load, RmsNorm ; Load, MatMul (w_gate_hidden)
 *     Swiglu ; Load, MatMul (w2) ; Add
 *
 * --seed only changes cosmetic things (the CNode_<id> debug-name numbers and
 * the subgraph instance pointer); the structure, shapes and operator order
 * depend only on the size flags.  Output is deterministic for equal flags.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Output buffer                                                       */
/* ------------------------------------------------------------------ */

#define OBUF_SIZE (1u << 20)

static FILE *g_out;
static const char *g_out_name = "<stdout>";
static char g_obuf[OBUF_SIZE];
static size_t g_olen;

static void die_write(void)
{
    fprintf(stderr, "gen-transformer: write error on %s: %s\n", g_out_name,
            strerror(errno));
    exit(1);
}

static void oflush(void)
{
    if (g_olen && fwrite(g_obuf, 1, g_olen, g_out) != g_olen)
        die_write();
    g_olen = 0;
}

static void on(const char *s, size_t n)
{
    if (n > OBUF_SIZE - g_olen) {
        oflush();
        if (n > OBUF_SIZE) {
            if (fwrite(s, 1, n, g_out) != n)
                die_write();
            return;
        }
    }
    memcpy(g_obuf + g_olen, s, n);
    g_olen += n;
}

static void os(const char *s) { on(s, strlen(s)); }

static void oc(char c)
{
    if (g_olen == OBUF_SIZE)
        oflush();
    g_obuf[g_olen++] = c;
}

/* Format a signed 64-bit integer into buf (no NUL), return its length. */
static size_t fmt_i64(char *buf, int64_t v)
{
    char tmp[24];
    size_t n = 0, k = 0;
    uint64_t u;
    if (v < 0) {
        buf[k++] = '-';
        u = (uint64_t)0 - (uint64_t)v;
    } else {
        u = (uint64_t)v;
    }
    do {
        tmp[n++] = (char)('0' + (int)(u % 10));
        u /= 10;
    } while (u);
    while (n)
        buf[k++] = tmp[--n];
    return k;
}

static void oi(int64_t v)
{
    char b[24];
    on(b, fmt_i64(b, v));
}

/* ------------------------------------------------------------------ */
/* Shapes, node table                                                  */
/* ------------------------------------------------------------------ */

enum dtype { DT_F32, DT_I32, DT_BOOL };

typedef struct {
    int rank;
    int64_t d[4];
} Shape;

typedef struct {
    unsigned char dt;
    Shape sh;
} NodeInfo;

static NodeInfo *g_nodes;
static size_t g_nnodes, g_cap_nodes;

static Shape S0(void) { Shape s = {0, {0, 0, 0, 0}}; return s; }
static Shape S1(int64_t a) { Shape s = {1, {a, 0, 0, 0}}; return s; }
static Shape S2(int64_t a, int64_t b) { Shape s = {2, {a, b, 0, 0}}; return s; }
static Shape S3(int64_t a, int64_t b, int64_t c) { Shape s = {3, {a, b, c, 0}}; return s; }
static Shape S4(int64_t a, int64_t b, int64_t c, int64_t d)
{
    Shape s = {4, {a, b, c, d}};
    return s;
}

/* "(d0, d1)" ; 1-D "(512)" ; scalar "()" */
static void oshape(const Shape *s)
{
    oc('(');
    for (int i = 0; i < s->rank; i++) {
        if (i)
            on(", ", 2);
        oi(s->d[i]);
    }
    oc(')');
}

static const char *dt_tensor(int dt)
{
    return dt == DT_I32 ? "Tensor[Int32]" : dt == DT_BOOL ? "Tensor[Bool]" : "Tensor[Float32]";
}

/* ------------------------------------------------------------------ */
/* Model configuration and parameters                                  */
/* ------------------------------------------------------------------ */

static int64_t L = 2, B = 8, S = 512, H = 1024, NH = 16, F = -1, V = 32000;
static uint64_t g_seed = 0;
static int64_t T, D; /* T = B*S tokens, D = H/NH head dim */
enum { ATT_BMM, ATT_FA_BSH, ATT_FA_BNSD };
static int g_att = ATT_BMM; /* -a */

enum { WQ, WK, WV, WO, W1, W2, W3, ATTN_NORM, FFN_NORM, NWEIGHTS_PER_LAYER };

static const char *const layer_wname[NWEIGHTS_PER_LAYER] = {
    "attention.wq.weight",    "attention.wk.weight",    "attention.wv.weight",
    "attention.wo.weight",    "feed_forward.w1.weight", "feed_forward.w2.weight",
    "feed_forward.w3.weight", "attention_norm.weight",  "ffn_norm.weight",
};

/* Parameter numbering (1-based, as in %paraN_):
 *   1 tokens, 2 labels, 3 embedding, 4 .. 3+9L per-layer weights,
 *   4+9L norm_out, 5+9L lm_head. */
#define P_TOKENS 1
#define P_LABELS 2
#define P_EMB 3
/* the flash-attention form has no w3 (its w1 is the fused gate+up weight) */
static int64_t NW = NWEIGHTS_PER_LAYER;
static int64_t p_layer(int64_t l, int w) { return 4 + l * NW + (g_att != ATT_BMM && w > W3 ? w - 1 : w); }
static int64_t p_norm_out(void) { return 4 + L * NW; }
static int64_t p_lm_head(void) { return 5 + L * NW; }
/* ... and adds the mask input and the rotary tables (inputs) */
static int64_t p_mask(void) { return 6 + L * NW; }
static int64_t p_cos(void) { return 7 + L * NW; }
static int64_t p_sin(void) { return 8 + L * NW; }
static int64_t n_params(void) { return (g_att == ATT_BMM ? 5 : 8) + L * NW; }

typedef struct {
    char name[96];
    int dt;
    int weight;
    Shape sh;
} ParamInfo;

static ParamInfo param_info(int64_t idx)
{
    ParamInfo p;
    p.dt = DT_F32;
    p.weight = 1;
    if (idx == P_TOKENS) {
        strcpy(p.name, "tokens");
        p.dt = DT_I32;
        p.weight = 0;
        p.sh = S2(B, S);
    } else if (idx == P_LABELS) {
        strcpy(p.name, "labels");
        p.dt = DT_I32;
        p.weight = 0;
        p.sh = S1(T);
    } else if (idx == P_EMB) {
        strcpy(p.name, "model.tok_embeddings.embedding_weight");
        p.sh = S2(V, H);
    } else if (idx == p_norm_out()) {
        strcpy(p.name, "model.norm_out.weight");
        p.sh = S1(H);
    } else if (idx == p_lm_head()) {
        strcpy(p.name, "lm_head.weight");
        p.sh = S2(V, H);
    } else if (g_att != ATT_BMM && idx == p_mask()) {
        strcpy(p.name, "attn_mask");
        p.dt = DT_BOOL;
        p.weight = 0;
        p.sh = S4(B, 1, S, S);
    } else if (g_att != ATT_BMM && (idx == p_cos() || idx == p_sin())) {
        strcpy(p.name, idx == p_cos() ? "freqs_cos" : "freqs_sin");
        p.weight = 0; /* computed by MindFormers' FreqsMgr, not trained */
        p.sh = g_att == ATT_FA_BSH ? S4(1, S, 1, D) : S4(1, 1, S, D);
    } else {
        int64_t l = (idx - 4) / NW;
        int w = (int)((idx - 4) % NW);
        if (g_att != ATT_BMM && w >= W3)
            w++;
        char *q = p.name;
        memcpy(q, "model.layers.", 13);
        q += 13;
        q += fmt_i64(q, l);
        *q++ = '.';
        strcpy(q, layer_wname[w]);
        if (g_att != ATT_BMM && w == W1)
            strcpy(q, "feed_forward.w_gate_hidden.weight");
        switch (w) {
        case WQ: case WK: case WV: case WO: p.sh = S2(H, H); break;
        case W1: p.sh = S2(g_att == ATT_BMM ? F : 2 * F, H); break;
        case W3: p.sh = S2(F, H); break;
        case W2: p.sh = S2(H, F); break;
        default: p.sh = S1(H); break;
        }
    }
    return p;
}

/* "<Ref[Tensor[Float32]], (..), ref_key=NAME>" or "<Tensor[Int32], (..)>" */
static void oparam_type(const ParamInfo *p)
{
    if (p->weight) {
        os("<Ref[");
        os(dt_tensor(p->dt));
        os("], ");
        oshape(&p->sh);
        os(", ref_key=");
        os(p->name);
        oc('>');
    } else {
        oc('<');
        os(dt_tensor(p->dt));
        os(", ");
        oshape(&p->sh);
        oc('>');
    }
}

/* ------------------------------------------------------------------ */
/* Operators, scopes, counters                                         */
/* ------------------------------------------------------------------ */

enum op {
    OP_LOAD, OP_GATHER, OP_RESHAPE, OP_RMSNORM, OP_MATMUL, OP_TRANSPOSE,
    OP_BATCHMATMUL, OP_MUL, OP_SOFTMAX, OP_ADD, OP_SILU, OP_SSCE, OP_RETURN,
    OP_FA, OP_ROPE, OP_SWIGLU, OP_TGI,
    NOPS
};

static const char *const op_name[NOPS] = {
    "Load", "Gather", "Reshape", "RmsNorm", "MatMul", "Transpose",
    "BatchMatMul", "Mul", "Softmax", "Add", "SiLU",
    "SparseSoftmaxCrossEntropyWithLogits", "Return",
    "FlashAttentionScore", "RotaryPositionEmbedding", "Swiglu", "TupleGetItem",
};

static const char *const op_instance[NOPS] = {
    NULL, "gather", "reshape", "norm", "matmul", "transpose",
    "batch_matmul", "mul", "softmax", "add", "silu",
    "sparse_softmax_cross_entropy", NULL,
    "flash_attention_score", "rotary_position_embedding", "swiglu", NULL,
};

static int64_t g_opcount[NOPS];  /* per-op-name "-opN" counters   */
static int64_t g_cnodes;         /* CNodes written (incl. Return) */
static int64_t g_literals;       /* literal (non-%) operands      */
static int64_t g_prims;          /* primitive operators (non-Return CNodes) */
static uint64_t g_cname;         /* CNode_<id> debug-name counter */

/* Operand type line accumulated while operands are written. */
static char g_tbuf[2048];
static size_t g_tlen;
static int g_nargs;

static void tadd(const char *s, size_t n)
{
    if (g_tlen + n > sizeof g_tbuf) {
        fprintf(stderr, "gen-transformer: internal error: type line too long\n");
        exit(3);
    }
    memcpy(g_tbuf + g_tlen, s, n);
    g_tlen += n;
}
static void tadds(const char *s) { tadd(s, strlen(s)); }
static void tshape(const Shape *s)
{
    char b[24];
    tadd("(", 1);
    for (int i = 0; i < s->rank; i++) {
        if (i)
            tadd(", ", 2);
        tadd(b, fmt_i64(b, s->d[i]));
    }
    tadd(")", 1);
}

static void arg_sep(void)
{
    if (g_nargs++) {
        on(", ", 2);
        tadd(", ", 2);
    }
}

/* Start "  %k(name) = Op(" ; returns k. name==NULL -> CNode_<id>. */
static size_t node_begin(const char *dbg, enum op op)
{
    size_t k = g_nnodes;
    on("  %", 3);
    oi((int64_t)k);
    oc('(');
    if (dbg) {
        os(dbg);
    } else {
        os("CNode_");
        oi((int64_t)g_cname++);
    }
    on(") = ", 4);
    os(op_name[op]);
    oc('(');
    g_tlen = 0;
    g_nargs = 0;
    return k;
}

static void arg_node(size_t k)
{
    const NodeInfo *ni = &g_nodes[k];
    arg_sep();
    oc('%');
    oi((int64_t)k);
    tadd("<", 1);
    tadds(dt_tensor(ni->dt));
    tadd(", ", 2);
    tshape(&ni->sh);
    tadd(">", 1);
}

static void arg_param(int64_t idx)
{
    ParamInfo p = param_info(idx);
    arg_sep();
    on("%para", 5);
    oi(idx);
    oc('_');
    os(p.name);
    /* type: same text as in the Params header */
    if (p.weight) {
        tadds("<Ref[");
        tadds(dt_tensor(p.dt));
        tadds("], ");
        tshape(&p.sh);
        tadds(", ref_key=");
        tadds(p.name);
        tadd(">", 1);
    } else {
        tadd("<", 1);
        tadds(dt_tensor(p.dt));
        tadd(", ", 2);
        tshape(&p.sh);
        tadd(">", 1);
    }
}

/* Literal operand: its text and its type entry. */
static void arg_lit(const char *text, const char *type)
{
    arg_sep();
    os(text);
    tadds(type);
    g_literals++;
}

static void arg_umonad(void) { arg_lit("UMonad[U]", "<UMonad, NoShape>"); }

/* Int64 tuple operand: (I64(a), I64(b), ...) typed Tuple[Int64*n]. */
static void arg_tuple(const Shape *t)
{
    arg_sep();
    oc('(');
    for (int i = 0; i < t->rank; i++) {
        if (i)
            on(", ", 2);
        on("I64(", 4);
        oi(t->d[i]);
        oc(')');
    }
    oc(')');
    tadds("<Tuple[Int64");
    if (t->rank != 1) { /* runs of equal element types print as T*n */
        char b[24];
        tadd("*", 1);
        tadd(b, fmt_i64(b, t->rank));
    }
    tadds("], TupleShape(");
    for (int i = 0; i < t->rank; i++)
        tadds(i ? ", NoShape" : "NoShape");
    tadds(")>");
    g_literals++;
}

static void node_store(size_t k, int dt, Shape sh)
{
    if (k >= g_cap_nodes) {
        size_t nc = g_cap_nodes ? g_cap_nodes * 2 : 4096;
        NodeInfo *p = realloc(g_nodes, nc * sizeof *p);
        if (!p) {
            fprintf(stderr, "gen-transformer: out of memory\n");
            exit(1);
        }
        g_nodes = p;
        g_cap_nodes = nc;
    }
    g_nodes[k].dt = (unsigned char)dt;
    g_nodes[k].sh = sh;
    g_nnodes = k + 1;
}

/* Finish the node: ") {instance name: x} primitive_attrs: {...}", the type
 * line, and the scope line "(SCOPE/Op-opN)". attrs may be NULL. */
static void node_end(size_t k, enum op op, const char *attrs, int dt, Shape out,
                     const char *scope)
{
    oc(')');
    if (op_instance[op]) {
        os(" {instance name: ");
        os(op_instance[op]);
        oc('}');
    }
    if (attrs) {
        os(" primitive_attrs: {");
        os(attrs);
        oc('}');
    }
    os("\n      : (");
    on(g_tbuf, g_tlen);
    os(") -> (<");
    os(dt_tensor(dt));
    os(", ");
    oshape(&out);
    os(">)\n      # Fullname with scope: (");
    os(scope);
    oc('/');
    os(op_name[op]);
    os("-op");
    oi(g_opcount[op]++);
    os(")\n");
    node_store(k, dt, out);
    g_cnodes++;
    g_prims++;
}

/* ------------------------------------------------------------------ */
/* Attribute texts (orders follow MindSpore's robin_hood HashMap)      */
/* ------------------------------------------------------------------ */

static const char A_MATMUL_TB[] =
    "output_names: [output], transpose_a: Bool(0), input_names: [x1, x2], "
    "transpose_x2: Bool(1), transpose_x1: Bool(0), transpose_b: Bool(1)";
static const char A_MATMUL_NN[] =
    "output_names: [output], transpose_a: Bool(0), input_names: [x1, x2], "
    "transpose_x2: Bool(0), transpose_x1: Bool(0), transpose_b: Bool(0)";
static const char A_RESHAPE[] = "output_names: [output], input_names: [tensor, shape]";
static const char A_TRANSPOSE[] = "output_names: [output], input_names: [x, perm]";
static const char A_BINARY[] = "output_names: [output], input_names: [x, y]";
static const char A_UNARY[] = "output_names: [output], input_names: [x]";
static const char A_SOFTMAX[] = "output_names: [output], input_names: [x], axis: (-1)";
static const char A_RMSNORM[] = "output_names: [y], input_names: [x, gamma, epsilon]";
static const char A_GATHER[] = "output_names: [output], input_names: [params, indices, axis]";
static const char A_FA[] =
    "output_names: [softmax_max, softmax_sum, softmax_out, attention_out], input_names: [query, key, "
    "value, real_shift, drop_mask, padding_mask, attn_mask, prefix, actual_seq_qlen, actual_seq_kvlen, "
    "head_num, keep_prob, scale_value, pre_tokens, next_tokens, inner_precise, input_layout, sparse_mode]";
static const char A_ROPE[] = "output_names: [output], input_names: [x, cos, sin, mode]";
static const char A_SWIGLU[] = "output_names: [output], input_names: [x, dim]";
static const char A_SSCE[] =
    "output_names: [output], input_names: [features, labels], is_grad: Bool(0)";

/* The same for FlashAttentionScore's tuple: softmax_max, softmax_sum
 * (b, n, s1, 8) Float32, softmax_out (1) and attention_out (q's shape). */
static void node_end_fa(size_t k, Shape q, const char *scope)
{
    Shape st = S4(B, NH, S, 8), one = S1(1);
    oc(')');
    os(" {instance name: ");
    os(op_instance[OP_FA]);
    os("} primitive_attrs: {");
    os(A_FA);
    os("}\n      : (");
    on(g_tbuf, g_tlen);
    os(") -> (<Tuple[Tensor[Float32]*4], TupleShape(");
    oshape(&st);
    os(", ");
    oshape(&st);
    os(", ");
    oshape(&one);
    os(", ");
    oshape(&q);
    os(")>)\n      # Fullname with scope: (");
    os(scope);
    os("/FlashAttentionScore-op");
    oi(g_opcount[OP_FA]++);
    os(")\n");
    node_store(k, DT_F32, q); /* only TupleGetItem 3 reads it */
    g_cnodes++;
    g_prims++;
}

/* ------------------------------------------------------------------ */
/* Building blocks                                                     */
/* ------------------------------------------------------------------ */

static size_t emit_load(int64_t pidx, const char *scope)
{
    ParamInfo p = param_info(pidx);
    size_t k = node_begin(NULL, OP_LOAD);
    arg_param(pidx);
    arg_umonad();
    node_end(k, OP_LOAD, NULL, p.dt, p.sh, scope);
    return k;
}

static char g_eps_lit[32];

static size_t emit_rmsnorm(size_t x, int64_t wparam, const char *scope)
{
    size_t w = emit_load(wparam, scope);
    size_t k = node_begin("x", OP_RMSNORM);
    arg_node(x);
    arg_node(w);
    arg_lit(g_eps_lit, "<Float32, NoShape>");
    node_end(k, OP_RMSNORM, A_RMSNORM, DT_F32, g_nodes[x].sh, scope);
    return k;
}

/* x (M,K) times W^T, W (N,K) -> (M,N). Load in load_scope, MatMul in scope. */
static size_t emit_linear(const char *dbg, size_t x, int64_t wparam,
                          const char *load_scope, const char *scope)
{
    ParamInfo p = param_info(wparam);
    size_t w = emit_load(wparam, load_scope);
    size_t k = node_begin(dbg, OP_MATMUL);
    arg_node(x);
    arg_node(w);
    node_end(k, OP_MATMUL, A_MATMUL_TB, DT_F32, S2(g_nodes[x].sh.d[0], p.sh.d[0]), scope);
    return k;
}

static size_t emit_reshape(const char *dbg, size_t x, Shape to, const char *scope)
{
    size_t k = node_begin(dbg, OP_RESHAPE);
    arg_node(x);
    arg_tuple(&to);
    node_end(k, OP_RESHAPE, A_RESHAPE, g_nodes[x].dt, to, scope);
    return k;
}

/* perm (0, 2, 1, 3) on a rank-4 tensor */
static size_t emit_transpose0213(const char *dbg, size_t x, const char *scope)
{
    const Shape perm = S4(0, 2, 1, 3);
    const Shape *in = &g_nodes[x].sh;
    Shape out = S4(in->d[0], in->d[2], in->d[1], in->d[3]);
    size_t k = node_begin(dbg, OP_TRANSPOSE);
    arg_node(x);
    arg_tuple(&perm);
    node_end(k, OP_TRANSPOSE, A_TRANSPOSE, DT_F32, out, scope);
    return k;
}

static size_t emit_binary(const char *dbg, enum op op, size_t a, size_t b,
                          const char *scope)
{
    size_t k = node_begin(dbg, op);
    arg_node(a);
    arg_node(b);
    node_end(k, op, A_BINARY, DT_F32, g_nodes[a].sh, scope);
    return k;
}

/* ------------------------------------------------------------------ */
/* Graph                                                               */
/* ------------------------------------------------------------------ */

#define SCOPE_NET "Default/network-LlamaForCausalLM"
#define SCOPE_MODEL SCOPE_NET "/model-LlamaModel"

enum { OPS_PER_LAYER = 34, LITS_PER_LAYER = 9 + 2 + 8 + 1 }; /* UMonads, eps, tuples, scale */
/* prologue: Load, Gather, Reshape ; epilogue: Load, RmsNorm, Load, MatMul, SSCE */
enum { OPS_PRO = 3, LITS_PRO = 1 + 1 + 1, OPS_EPI = 5, LITS_EPI = 2 + 1 };

/* the scopes of one decoder layer's cells (fa: the fused form's names) */
typedef struct {
    char base[160], attn[224], q[256], k[256], v[256], o[256], rope[288];
    char anorm[224], fnorm[224], ffn[224], w1[256], w2[256], w3[256];
} LayerScopes;

static void layer_scopes(LayerScopes *c, int64_t l, int fa)
{
    snprintf(c->base, sizeof c->base, SCOPE_MODEL "/layers-CellList/%" PRId64 "-LLamaDecodeLayer", l);
    snprintf(c->attn, sizeof c->attn, "%s/attention-LLamaAttention", c->base);
    snprintf(c->q, sizeof c->q, "%s/wq-Linear", c->attn);
    snprintf(c->k, sizeof c->k, "%s/wk-Linear", c->attn);
    snprintf(c->v, sizeof c->v, "%s/wv-Linear", c->attn);
    snprintf(c->o, sizeof c->o, "%s/wo-Linear", c->attn);
    snprintf(c->rope, sizeof c->rope, "%s/apply_rotary_emb-RotaryEmbedding", c->attn);
    snprintf(c->anorm, sizeof c->anorm, "%s/attention_norm-LlamaRMSNorm", c->base);
    snprintf(c->fnorm, sizeof c->fnorm, "%s/ffn_norm-LlamaRMSNorm", c->base);
    snprintf(c->ffn, sizeof c->ffn, "%s/feed_forward-LlamaFeedForward", c->base);
    snprintf(c->w1, sizeof c->w1, fa ? "%s/w_gate_hidden-Linear" : "%s/w1-Linear", c->ffn);
    snprintf(c->w2, sizeof c->w2, "%s/w2-Linear", c->ffn);
    snprintf(c->w3, sizeof c->w3, "%s/w3-Linear", c->ffn);
}

static size_t emit_layer(int64_t l, size_t x, const char *scale_lit)
{
    LayerScopes c;
    layer_scopes(&c, l, 0);
    const char *base = c.base, *sc_attn = c.attn, *sc_q = c.q, *sc_k = c.k, *sc_v = c.v, *sc_o = c.o;
    const char *sc_anorm = c.anorm, *sc_fnorm = c.fnorm, *sc_ffn = c.ffn, *sc_w1 = c.w1, *sc_w2 = c.w2,
               *sc_w3 = c.w3;

    /* attention */
    size_t h = emit_rmsnorm(x, p_layer(l, ATTN_NORM), sc_anorm);
    size_t q = emit_linear("query", h, p_layer(l, WQ), sc_attn, sc_q);
    size_t k = emit_linear("key", h, p_layer(l, WK), sc_attn, sc_k);
    size_t v = emit_linear("value", h, p_layer(l, WV), sc_attn, sc_v);
    const Shape heads = S4(B, S, NH, D);
    q = emit_transpose0213("query", emit_reshape("query", q, heads, sc_attn), sc_attn);
    k = emit_transpose0213("key", emit_reshape("key", k, heads, sc_attn), sc_attn);
    v = emit_transpose0213("value", emit_reshape("value", v, heads, sc_attn), sc_attn);

    size_t sc = node_begin("score", OP_BATCHMATMUL);
    arg_node(q);
    arg_node(k);
    node_end(sc, OP_BATCHMATMUL, A_MATMUL_TB, DT_F32, S4(B, NH, S, S), sc_attn);

    size_t sm = node_begin("score", OP_MUL);
    arg_node(sc);
    arg_lit(scale_lit, "<Tensor[Float32], (), value=...>");
    node_end(sm, OP_MUL, A_BINARY, DT_F32, S4(B, NH, S, S), sc_attn);

    size_t pr = node_begin("probs", OP_SOFTMAX);
    arg_node(sm);
    node_end(pr, OP_SOFTMAX, A_SOFTMAX, DT_F32, S4(B, NH, S, S), sc_attn);

    size_t ctx = node_begin("context", OP_BATCHMATMUL);
    arg_node(pr);
    arg_node(v);
    node_end(ctx, OP_BATCHMATMUL, A_MATMUL_NN, DT_F32, S4(B, NH, S, D), sc_attn);

    ctx = emit_transpose0213("context", ctx, sc_attn);
    ctx = emit_reshape("context", ctx, S2(T, H), sc_attn);
    size_t o = emit_linear("output", ctx, p_layer(l, WO), sc_attn, sc_o);
    size_t x1 = emit_binary("x", OP_ADD, x, o, base);

    /* feed-forward */
    h = emit_rmsnorm(x1, p_layer(l, FFN_NORM), sc_fnorm);
    size_t g = emit_linear("gate", h, p_layer(l, W1), sc_ffn, sc_w1);
    size_t a = node_begin("gate", OP_SILU);
    arg_node(g);
    node_end(a, OP_SILU, A_UNARY, DT_F32, g_nodes[g].sh, sc_ffn);
    size_t u = emit_linear("hidden", h, p_layer(l, W3), sc_ffn, sc_w3);
    size_t m = emit_binary("hidden", OP_MUL, a, u, sc_ffn);
    size_t f = emit_linear("output", m, p_layer(l, W2), sc_ffn, sc_w2);
    return emit_binary("output", OP_ADD, x1, f, base);
}

/* RotaryPositionEmbedding(x, cos, sin, I64(0)), cos and sin graph inputs */
static size_t emit_rope(const char *dbg, size_t x, const char *scope)
{
    size_t k = node_begin(dbg, OP_ROPE);
    arg_node(x);
    arg_param(p_cos());
    arg_param(p_sin());
    arg_lit("I64(0)", "<Int64, NoShape>");
    node_end(k, OP_ROPE, A_ROPE, DT_F32, g_nodes[x].sh, scope);
    return k;
}

enum { OPS_FA_BSH = 29, OPS_FA_BNSD = 31, LITS_FA_BSH = 34, LITS_FA_BNSD = 36 };

/* One decoder layer in MindFormers' fused form (see the head comment). */
static size_t emit_layer_fa(int64_t l, size_t x, const char *scale_lit)
{
    LayerScopes c;
    layer_scopes(&c, l, 1);
    const char *base = c.base, *sc_attn = c.attn, *sc_q = c.q, *sc_k = c.k, *sc_v = c.v, *sc_o = c.o;
    const char *sc_anorm = c.anorm, *sc_fnorm = c.fnorm, *sc_ffn = c.ffn, *sc_w1 = c.w1, *sc_w2 = c.w2,
               *sc_rope = c.rope;
    int bnsd = g_att == ATT_FA_BNSD;

    size_t h = emit_rmsnorm(x, p_layer(l, ATTN_NORM), sc_anorm);
    size_t q = emit_linear("query", h, p_layer(l, WQ), sc_attn, sc_q);
    size_t k = emit_linear("key", h, p_layer(l, WK), sc_attn, sc_k);
    size_t v = emit_linear("value", h, p_layer(l, WV), sc_attn, sc_v);
    const Shape heads = S4(B, S, NH, D), bsh = S3(B, S, H);
    q = emit_reshape("query", q, heads, sc_attn);
    k = emit_reshape("key", k, heads, sc_attn);
    v = emit_reshape("value", v, bnsd ? heads : bsh, sc_attn);
    if (bnsd) {
        q = emit_transpose0213("query", q, sc_attn);
        k = emit_transpose0213("key", k, sc_attn);
        v = emit_transpose0213("value", v, sc_attn);
    }
    q = emit_rope("query", q, sc_rope);
    k = emit_rope("key", k, sc_rope);
    if (!bnsd) {
        q = emit_reshape("query", q, bsh, sc_attn);
        k = emit_reshape("key", k, bsh, sc_attn);
    }

    char lit[160];
    size_t fa = node_begin("attn", OP_FA);
    arg_node(q);
    arg_node(k);
    arg_node(v);
    for (int i = 0; i < 3; i++)
        arg_lit("None", "<None, NoShape>"); /* real_shift, drop_mask, padding_mask */
    arg_param(p_mask());
    for (int i = 0; i < 3; i++)
        arg_lit("None", "<None, NoShape>"); /* prefix, actual_seq_qlen, actual_seq_kvlen */
    snprintf(lit, sizeof lit, "I64(%" PRId64 ")", NH);
    arg_lit(lit, "<Int64, NoShape>");
    arg_lit("F32(1)", "<Float32, NoShape>");
    snprintf(lit, sizeof lit, "F32(%s)", scale_lit);
    arg_lit(lit, "<Float32, NoShape>");
    arg_lit("I64(2147483647)", "<Int64, NoShape>");
    arg_lit("I64(2147483647)", "<Int64, NoShape>");
    arg_lit("I64(0)", "<Int64, NoShape>");
    arg_lit(bnsd ? "I64(1)" : "I64(0)", "<Int64, NoShape>"); /* FASInputLayoutMode */
    arg_lit("I64(0)", "<Int64, NoShape>");
    Shape qs = g_nodes[q].sh;
    node_end_fa(fa, qs, sc_attn);

    size_t ctx = node_begin("context", OP_TGI);
    arg_sep();
    oc('%');
    oi((int64_t)fa);
    {
        Shape st = S4(B, NH, S, 8), one = S1(1);
        char b[24];
        tadds("<Tuple[Tensor[Float32]*4], TupleShape(");
        Shape *sh[4] = {&st, &st, &one, &qs};
        for (int i = 0; i < 4; i++) {
            if (i)
                tadds(", ");
            tshape(sh[i]);
        }
        tadds(")>");
        (void)b;
    }
    arg_lit("I64(3)", "<Int64, NoShape>");
    node_end(ctx, OP_TGI, NULL, DT_F32, qs, sc_attn);
    if (bnsd)
        ctx = emit_transpose0213("context", ctx, sc_attn);
    ctx = emit_reshape("context", ctx, S2(T, H), sc_attn);
    size_t o = emit_linear("output", ctx, p_layer(l, WO), sc_attn, sc_o);
    size_t x1 = emit_binary("x", OP_ADD, x, o, base);

    h = emit_rmsnorm(x1, p_layer(l, FFN_NORM), sc_fnorm);
    size_t g = emit_linear("gate_hidden", h, p_layer(l, W1), sc_ffn, sc_w1);
    size_t a = node_begin("hidden", OP_SWIGLU);
    arg_node(g);
    arg_lit("I64(-1)", "<Int64, NoShape>");
    node_end(a, OP_SWIGLU, A_SWIGLU, DT_F32, S2(T, F), sc_ffn);
    size_t f = emit_linear("output", a, p_layer(l, W2), sc_ffn, sc_w2);
    return emit_binary("output", OP_ADD, x1, f, base);
}

/* %.6g, like C++ default stream formatting */
static void fmt_float(char *buf, size_t n, double v) { snprintf(buf, n, "%g", v); }

/* sqrt without libm (Newton iteration), enough for 1/sqrt(head_dim). */
static double my_sqrt(double x)
{
    double r = x > 1 ? x : 1;
    for (int i = 0; i < 100; i++)
        r = 0.5 * (r + x / r);
    return r;
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void generate(void)
{
    int64_t P = n_params();
    int64_t opl = g_att == ATT_BMM ? OPS_PER_LAYER : g_att == ATT_FA_BSH ? OPS_FA_BSH : OPS_FA_BNSD;
    int64_t lpl = g_att == ATT_BMM ? LITS_PER_LAYER : g_att == ATT_FA_BSH ? LITS_FA_BSH : LITS_FA_BNSD;
    int64_t ncnodes = OPS_PRO + L * opl + OPS_EPI + 1;
    int64_t nlits = LITS_PRO + L * lpl + LITS_EPI;
    int64_t nnodes = ncnodes + P + (ncnodes - 1) + nlits;
    uint64_t st = g_seed;
    uint64_t r1 = splitmix64(&st), r2 = splitmix64(&st);
    char scale_lit[128], buf[64], buf_scale[64];

    g_cname = 100 + (r1 % 900000);
    snprintf(g_eps_lit, sizeof g_eps_lit, "F32(1e-06)");
    fmt_float(buf_scale, sizeof buf_scale, 1.0 / my_sqrt((double)D));
    snprintf(scale_lit, sizeof scale_lit, "Tensor(shape=[], dtype=Float32, value=%s)", buf_scale);

    /* header */
    os("# generated by gen-transformer: L=");
    oi(L); os(" b="); oi(B); os(" s="); oi(S); os(" H="); oi(H);
    os(" n="); oi(NH); os(" f="); oi(F); os(" v="); oi(V);
    os(" seed="); oi((int64_t)(g_seed & INT64_MAX));
    if (g_att != ATT_BMM)
        os(g_att == ATT_FA_BSH ? " attention=fa-bsh" : " attention=fa-bnsd");
    os("\n# IR entry: @main\n# Total subgraphs: 1\n\n# Total params: ");
    oi(P);
    os("\n# Params:\n");
    for (int64_t i = 1; i <= P; i++) {
        ParamInfo p = param_info(i);
        on("%para", 5);
        oi(i);
        oc('_');
        os(p.name);
        on(": ", 2);
        oparam_type(&p);
        if (p.weight)
            os("  :  has_default");
        oc('\n');
    }
    os("\nNode counting information:\nTotal number of nodes: ");
    oi(nnodes);
    os("\nTotal number of cnodes: ");
    oi(ncnodes);
    os("\n\nsubgraph attr:\nsubgraph instance: main : 0x");
    snprintf(buf, sizeof buf, "%" PRIx64, (uint64_t)(0x100000000ULL + ((r2 & 0xffffffULL) << 4)));
    os(buf);
    os("\nsubgraph @main() {\n");

    /* embedding */
    const char *sc_emb = SCOPE_MODEL "/tok_embeddings-LlamaEmbedding";
    size_t e = emit_load(P_EMB, sc_emb);
    size_t x = node_begin("x", OP_GATHER);
    arg_node(e);
    arg_param(P_TOKENS);
    arg_lit("I64(0)", "<Int64, NoShape>");
    node_end(x, OP_GATHER, A_GATHER, DT_F32, S3(B, S, H), sc_emb);
    x = emit_reshape("x", x, S2(T, H), SCOPE_MODEL);

    for (int64_t l = 0; l < L; l++)
        x = g_att == ATT_BMM ? emit_layer(l, x, scale_lit) : emit_layer_fa(l, x, buf_scale);

    /* head + loss */
    x = emit_rmsnorm(x, p_norm_out(), SCOPE_MODEL "/norm_out-LlamaRMSNorm");
    size_t logits = emit_linear("logits", x, p_lm_head(), SCOPE_NET "/lm_head-Linear",
                                SCOPE_NET "/lm_head-Linear");
    size_t loss = node_begin("loss", OP_SSCE);
    arg_node(logits);
    arg_param(P_LABELS);
    node_end(loss, OP_SSCE, A_SSCE, DT_F32, S0(), SCOPE_NET "/loss-CrossEntropyLoss");

    os("  Return(%");
    oi((int64_t)loss);
    os(")\n      : (<Tensor[Float32], ()>)\n      # Fullname with scope: (Default/Return-op");
    oi(g_opcount[OP_RETURN]++);
    os(")\n}\n");
    g_cnodes++;

    if (g_cnodes != ncnodes || g_literals != nlits || g_prims != ncnodes - 1) {
        fprintf(stderr,
                "gen-transformer: internal error: node counts disagree "
                "(cnodes %" PRId64 "/%" PRId64 ", literals %" PRId64 "/%" PRId64 ")\n",
                g_cnodes, ncnodes, g_literals, nlits);
        exit(3);
    }
}

/* ------------------------------------------------------------------ */
/* CLI                                                                 */
/* ------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fputs("usage: gen-transformer [-L layers] [-b batch] [-s seq] [-H hidden] [-n heads]\n"
          "                       [-f ffn] [-v vocab] [-a KIND] [--seed S] [-o FILE]\n"
          "Write an L-layer LLaMA-style transformer training graph in sappc IR text.\n"
          "  -L, --layers N   decoder layers (default 2)\n"
          "  -b, --batch N    batch size (default 8)\n"
          "  -s, --seq N      sequence length (default 512)\n"
          "  -H, --hidden N   hidden size (default 1024)\n"
          "  -n, --heads N    attention heads, must divide hidden (default 16)\n"
          "  -f, --ffn N      feed-forward width (default 4*hidden)\n"
          "  -v, --vocab N    vocabulary size (default 32000)\n"
          "  -a, --attention KIND  bmm (BatchMatMul + Softmax, default), fa-bsh or fa-bnsd\n"
          "                   (FlashAttentionScore in that layout, rotary embedding, SwiGLU)\n"
          "      --seed S     cosmetic seed for debug names (default 0)\n"
          "  -o, --output F   output file (default stdout)\n"
          "  -h, --help       show this help\n",
          f);
}

static int64_t parse_num(const char *opt, const char *arg, int64_t lo, int64_t hi)
{
    char *end;
    errno = 0;
    long long v = strtoll(arg, &end, 10);
    if (errno || end == arg || *end || v < lo || v > hi) {
        fprintf(stderr, "gen-transformer: invalid value '%s' for %s (expected %" PRId64
                        "..%" PRId64 ")\n", arg, opt, lo, hi);
        exit(2);
    }
    return (int64_t)v;
}

int main(int argc, char **argv)
{
    static const struct option lopts[] = {
        {"layers", required_argument, NULL, 'L'}, {"batch", required_argument, NULL, 'b'},
        {"seq", required_argument, NULL, 's'},    {"hidden", required_argument, NULL, 'H'},
        {"heads", required_argument, NULL, 'n'},  {"ffn", required_argument, NULL, 'f'},
        {"vocab", required_argument, NULL, 'v'},  {"seed", required_argument, NULL, 'S'},
        {"output", required_argument, NULL, 'o'}, {"help", no_argument, NULL, 'h'},
        {"attention", required_argument, NULL, 'a'},
        {NULL, 0, NULL, 0},
    };
    const char *outpath = NULL;
    const int64_t DMAX = (int64_t)1 << 31;
    int c;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":L:b:s:H:n:f:v:o:a:h", lopts, NULL)) != -1) {
        switch (c) {
        case 'L': L = parse_num("-L", optarg, 0, 10000000); break;
        case 'b': B = parse_num("-b", optarg, 1, DMAX); break;
        case 's': S = parse_num("-s", optarg, 1, DMAX); break;
        case 'H': H = parse_num("-H", optarg, 1, DMAX); break;
        case 'n': NH = parse_num("-n", optarg, 1, DMAX); break;
        case 'f': F = parse_num("-f", optarg, 1, DMAX); break;
        case 'v': V = parse_num("-v", optarg, 1, DMAX); break;
        case 'S': g_seed = (uint64_t)parse_num("--seed", optarg, 0, INT64_MAX); break;
        case 'o': outpath = optarg; break;
        case 'a':
            if (strcmp(optarg, "bmm") == 0)
                g_att = ATT_BMM;
            else if (strcmp(optarg, "fa-bsh") == 0)
                g_att = ATT_FA_BSH;
            else if (strcmp(optarg, "fa-bnsd") == 0)
                g_att = ATT_FA_BNSD;
            else {
                fprintf(stderr, "gen-transformer: invalid value '%s' for -a (bmm, fa-bsh, fa-bnsd)\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        case ':':
        default: {
            const char *arg = argv[optind - 1];
            const char *what = c == ':' ? "needs an argument" : "is unknown";
            if (strncmp(arg, "--", 2) == 0) {
                size_t len = strcspn(arg, "=");
                fprintf(stderr, "gen-transformer: option %.*s %s\n", (int)len, arg, what);
            } else {
                fprintf(stderr, "gen-transformer: option -%c %s\n", optopt, what);
            }
            fprintf(stderr, "Try 'gen-transformer --help'.\n");
            return 2;
        }
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gen-transformer: unexpected argument '%s'\n", argv[optind]);
        fprintf(stderr, "Try 'gen-transformer --help'.\n");
        return 2;
    }
    if (F < 0)
        F = 4 * H;
    if (H % NH) {
        fprintf(stderr, "gen-transformer: heads (%" PRId64 ") must divide hidden (%" PRId64 ")\n",
                NH, H);
        return 2;
    }
    if (B > INT64_MAX / S || B * S > INT64_MAX / (H > V ? (H > F ? H : F) : (V > F ? V : F))) {
        fprintf(stderr, "gen-transformer: sizes too large\n");
        return 2;
    }
    T = B * S;
    D = H / NH;
    if (g_att != ATT_BMM)
        NW = NWEIGHTS_PER_LAYER - 1;

    if (outpath && strcmp(outpath, "-") != 0) {
        g_out = fopen(outpath, "wb");
        if (!g_out) {
            fprintf(stderr, "gen-transformer: cannot open %s: %s\n", outpath, strerror(errno));
            return 1;
        }
        g_out_name = outpath;
    } else {
        g_out = stdout;
    }
    setvbuf(g_out, NULL, _IOFBF, (size_t)1 << 20);

    generate();

    oflush();
    if (fflush(g_out) != 0 || ferror(g_out))
        die_write();
    if (g_out != stdout && fclose(g_out) != 0)
        die_write();
    free(g_nodes);
    return 0;
}
