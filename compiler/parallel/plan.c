/* plan.c — from a schedule to the program of one step: buffers with their
 * micro-batch slots and static offsets (the memory plan), copy operations
 * between stages, and the dependencies that become events.
 *
 * Each value has a buffer on its home stage and a received copy on every
 * other stage that reads it (a skip connection is sent straight to its
 * reader). A reshape (Reshape, Flatten, Squeeze, Unsqueeze, Identity) of
 * an activation into one of the same type takes its input's buffer: the
 * same bytes, no copy (in_place). Where either value leaves the stage's
 * compute stream (a copy sends it, the host reads it, an update reads it
 * as a gradient), the reshape copies as any node writes its output. A buffer holds as many micro-batches as are alive at once on
 * its device under the schedule (one more for buffers a copy reads or
 * writes, so copies overlap compute); micro-batch mb uses slot mb % slots.
 * Dependencies:
 *   - a copy waits for the action that produced its micro-batch, and for
 *     the last reader of the micro-batch that used its destination slot
 *     before (so it never overwrites a slot still being read);
 *   - an action waits for the copies it reads, and before overwriting a
 *     slot, for the copies that read the slot's previous micro-batch.
 * Actions of one device follow the schedule on its compute stream; copies
 * go on the sender's copy stream for their direction.
 * With --offload, an offloaded value (offload.c) also has a host buffer
 * and a fetched buffer the backward reads: its copy out waits for the
 * forward and the action after its window waits for it; its copy back
 * waits for the copy out and the action before its window (make_offload,
 * offload_copies, offload_deps). An offloaded weight (--offload=weights)
 * has a host buffer where it lives between steps: a copy brings it in
 * before each of its windows and, after one that writes it, takes it
 * back (make_streamed, streamed_copies, streamed_deps). The simulator
 * (sim.c) times every operation; the host issues them in order of
 * predicted start, a topological order of the dependencies.
 * With replicas (--data-parallel), each bucket of a stage's gradients
 * (replicas.c, plan_buckets) is summed over the replicas by an operation
 * on its device's communication stream: the last micro-batch's last
 * gradient action runs in parts that end where buckets are done, a sum
 * waits for its part, and the stage's update (with --clip-norm, every
 * update) waits for the sum (bucket_cuts, split_actions, sum_ops).
 */
#include "mpcc.h"

#include <stdlib.h>
#include <string.h>

const char *const stream_kinds[STREAMS_PER_DEV] = {"compute", "send", "send-back", "comm"};

typedef struct PlanBuild {
    Plan *p;
    Graph *g;
    const Stages *st;
    const Schedule *sc;
    Arena *a;
    int S, M;
    int *first_use, *last_use;   /* [nbufs * M]: positions in the device's sequence */
    int *run_pos;                /* [act_key]: position of an action in its device's sequence */
    int *run_op;                 /* [act_key]: its op */
    int *copy_op;                /* [nbufs * M] */
    int *sum_op;                 /* [nbuckets] */
    int **part_op;               /* [S][nparts]: the ops of a split action */
    bool *sent;                  /* [nbufs]: a home buffer some stage receives */
    int *host_of;                /* [nbufs]: the host buffer an offloaded one goes to, -1 */
    bool own_slots;              /* every micro-batch its own slot: no reuse to wait for */
    bool tree;                   /* the gradient sums are trees (replicas.c) */
    const Options *o;
    int cap_bufs, cap_ops;
} PB;   /* what the entry points below share, kept in Plan.build */

static int act_key(const PB *b, int kind, int stage, int mb)
{
    return (stage * ACT_KINDS + kind) * b->M + mb;
}

static size_t round64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* ---- the nodes of each action ---- */

static void collect_nodes(PB *b)
{
    Plan *p = b->p;
    size_t n = (size_t)b->S * ACT_KINDS;
    p->nodes = arena_array(b->a, n, sizeof(uint32_t *));
    p->nnodes = arena_array(b->a, n, sizeof(int));
    for (uint32_t i = 0; i < b->g->norder; i++) {
        uint32_t id = b->g->order[i];
        size_t k = (size_t)b->st->stage[id] * ACT_KINDS + b->st->act[id];
        p->nodes[k] = arena_grow(b->a, p->nodes[k], (size_t)p->nnodes[k],
                                 (size_t)p->nnodes[k] + 1, sizeof(uint32_t));
        p->nodes[k][p->nnodes[k]++] = id;
    }
}

/* ---- buffers ---- */

static bool slotted(const Graph *g, uint32_t v)
{
    return g->values[v].kind == VK_ACTIVATION || g->values[v].kind == VK_INPUT;
}

static int new_buf(PB *b, uint32_t v, int stage, bool received)
{
    Plan *p = b->p;
    if (p->nbufs == b->cap_bufs) {
        int cap = b->cap_bufs ? 2 * b->cap_bufs : 256;
        p->bufs = arena_grow(b->a, p->bufs, (size_t)p->nbufs, (size_t)cap, sizeof(Buf));
        b->cap_bufs = cap;
    }
    const Value *val = &b->g->values[v];
    size_t bytes = (size_t)shape_numel(&val->shape) * dtype_size(val->dtype);
    p->bufs[p->nbufs] = (Buf){.value = v, .stage = stage, .dev = b->st->dev[stage],
                             .slots = 1, .levels = 1,
                             .bytes = round64(bytes ? bytes : 1), .received = received, .from = -1};
    return p->nbufs++;
}

/* Whether node n moves its input's bytes unchanged into an activation of
 * the same type: a reshape that may take its input's buffer (in_place;
 * cost.c prices it at nothing). */
bool moves_in_place(const Graph *g, const Node *n)
{
    switch (n->op) {
    case OP_RESHAPE: case OP_FLATTEN: case OP_SQUEEZE: case OP_UNSQUEEZE: case OP_IDENTITY:
        break;
    default:
        return false;
    }
    if (n->nin < 1 || n->nout < 1 || n->in[0] == NONE || n->out[0] == NONE)
        return false;
    const Value *x = &g->values[n->in[0]], *y = &g->values[n->out[0]];
    return x->kind == VK_ACTIVATION && y->kind == VK_ACTIVATION && x->dtype == y->dtype &&
           !x->is_output && !y->is_output;
}

/* [nvalues]: read on a stage other than its home. */
static bool *crossing(const PB *b)
{
    const Graph *g = b->g;
    bool *c = arena_array(b->a, g->nvalues, sizeof(bool));
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *n = &g->nodes[g->order[i]];
        for (uint32_t k = 0; k < n->nin; k++)
            if (n->in[k] != NONE && b->st->home[n->in[k]] != b->st->stage[g->order[i]])
                c[n->in[k]] = true;
    }
    return c;
}

/* Whether reshape n takes its input's buffer: both values live on n's
 * stage alone and only its compute stream touches them. */
static bool in_place(const PB *b, const Node *n, const bool *cross, const bool *outside)
{
    if (!moves_in_place(b->g, n))
        return false;
    uint32_t x = n->in[0], y = n->out[0];
    int s = b->st->stage[n - b->g->nodes];
    return b->st->home[x] == s && b->st->home[y] == s && !cross[x] && !cross[y] &&
           !outside[x] && !outside[y];
}

/* The value whose buffer each value takes (itself if its own).
 * BatchNormalization writes its running statistics into the parameters
 * it read them from: those outputs share the parameters' buffers; and a
 * reshape in place shares its input's. */
static uint32_t *buffer_aliases(PB *b)
{
    Graph *g = b->g;
    uint32_t *alias = arena_array(b->a, g->nvalues, sizeof(uint32_t));
    bool *cross = crossing(b), *outside = plan_read_outside(g, b->a);
    for (uint32_t v = 0; v < g->nvalues; v++)
        alias[v] = v;
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *n = &g->nodes[g->order[i]];
        if (n->op == OP_BATCH_NORM)
            for (uint32_t k = 1; k < 3 && k < n->nout; k++)
                if (n->out[k] != NONE)
                    alias[n->out[k]] = n->in[k + 2];
        if (in_place(b, n, cross, outside))
            alias[n->out[0]] = n->in[0];
    }
    return alias;
}

static int ensure_buf(PB *b, uint32_t v, int stage)
{
    Plan *p = b->p;
    int *slot = &p->buf_of[(size_t)v * b->S + stage];
    if (*slot >= 0)
        return *slot;
    int home = b->st->home[v];
    if (home < 0 || home == stage || b->g->values[v].kind == VK_CONST) {
        *slot = new_buf(b, v, stage, false);
        return *slot;
    }
    int src = ensure_buf(b, v, home);
    *slot = new_buf(b, v, stage, true);
    p->bufs[*slot].from = src;
    return *slot;
}

static void make_bufs(PB *b)
{
    Graph *g = b->g;
    Plan *p = b->p;
    p->buf_of = arena_array(b->a, (size_t)g->nvalues * b->S, sizeof(int));
    memset(p->buf_of, 0xff, (size_t)g->nvalues * b->S * sizeof(int));
    uint32_t *alias = buffer_aliases(b);
    for (uint32_t i = 0; i < g->norder; i++) {
        uint32_t id = g->order[i];
        const Node *n = &g->nodes[id];
        int s = b->st->stage[id];
        for (uint32_t k = 0; k < n->nin; k++)
            if (n->in[k] != NONE)
                ensure_buf(b, n->in[k], s);
        for (uint32_t k = 0; k < n->nout; k++)
            if (n->out[k] != NONE && alias[n->out[k]] != n->out[k]) {
                int shared = ensure_buf(b, alias[n->out[k]], s);
                p->buf_of[(size_t)n->out[k] * b->S + s] = shared;
                p->bufs[shared].shared = true;
            } else if (n->out[k] != NONE)
                ensure_buf(b, n->out[k], s);
    }
    p->acc_of = arena_array(b->a, g->nvalues, sizeof(int));
    for (uint32_t v = 0; v < g->nvalues; v++) {
        p->acc_of[v] = -1;
        if (g->values[v].trainable && b->M > 1 && b->st->home[v] >= 0) {
            p->acc_of[v] = new_buf(b, v, b->st->home[v], false);   /* may move p->bufs */
            Buf *acc = &p->bufs[p->acc_of[v]];
            acc->acc = true;
            acc->levels = b->tree ? tree_levels(b->M) : 1;
            acc->bytes *= (size_t)acc->levels;
        }
    }
}

/* --zero=1: each replica holds 1/R of every optimizer state tensor (the
 * state inputs of SGD and AdamW), the largest share: ceil(n / R). */
static void shard_optimizer_state(PB *b, const Options *o)
{
    int R = o->pipe.replicas;
    if (!o->pipe.zero || R <= 1)
        return;
    Graph *g = b->g;
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *n = &g->nodes[g->order[i]];
        if (n->op != OP_SGD && n->op != OP_ADAMW)
            continue;
        for (uint32_t k = 2; k < n->nin; k++) {
            int r = n->in[k] == NONE ? -1 : plan_buf(b->p, n->in[k], b->st->stage[g->order[i]]);
            if (r < 0)
                continue;
            Buf *bf = &b->p->bufs[r];
            size_t numel = shape_numel(&g->values[n->in[k]].shape);
            bf->shard = R;
            bf->bytes = round64((numel + (size_t)R - 1) / (size_t)R * sizeof(float));
        }
    }
}

/* --offload=weights: each chosen weight's host buffer, where it lives
 * between steps (offload.c chose them and their windows). */
static void make_streamed(PB *b)
{
    Plan *p = b->p;
    p->whost_of = arena_array(b->a, b->g->nvalues, sizeof(int));
    memset(p->whost_of, 0xff, b->g->nvalues * sizeof(int));
    for (int i = 0; i < p->nwofl; i++) {
        Streamed *w = &p->wofl[i];
        w->host = new_buf(b, w->value, w->stage, false);
        p->bufs[w->host].host = p->bufs[w->host].streamed = p->bufs[w->dev].streamed = true;
        p->bufs[w->host].from = w->dev;
        p->bufs[w->dev].from = w->host;
        p->whost_of[w->value] = w->host;
        w->fetch_op = arena_array(b->a, (size_t)w->nwin, sizeof(int));
        w->evict_op = arena_array(b->a, (size_t)w->nwin, sizeof(int));
        memset(w->evict_op, 0xff, (size_t)w->nwin * sizeof(int));
    }
}

/* --offload: each chosen activation's host buffer and the fetched copy
 * its stage's backward reads (offload.c chose them). */
static void make_offload(PB *b, const Options *o)
{
    Plan *p = b->p;
    p->fetch_of = arena_array(b->a, (size_t)b->g->nvalues * b->S, sizeof(int));
    memset(p->fetch_of, 0xff, (size_t)b->g->nvalues * b->S * sizeof(int));
    p->offl = offload_choose(p, o, b->a, &p->noffl);
    p->wofl = offload_weights(p, o, b->a, &p->nwofl);
    if (o->pipe.offload_keep > 0)
        offload_trim(p, p->offl, &p->noffl, p->wofl, &p->nwofl, o->pipe.offload_keep);
    for (int i = 0; i < p->noffl; i++) {
        Offload *f = &p->offl[i];
        f->host = new_buf(b, f->value, f->stage, false);
        p->bufs[f->host].host = true;
        p->bufs[f->host].from = f->dev;
        f->fetched = new_buf(b, f->value, f->stage, false);
        p->bufs[f->fetched].from = f->host;
        for (uint32_t v = 0; v < b->g->nvalues; v++)   /* and every reshape in place of it */
            if (plan_buf(p, v, f->stage) == f->dev)
                p->fetch_of[(size_t)v * b->S + f->stage] = f->fetched;
    }
    make_streamed(b);
    b->host_of = arena_array(b->a, (size_t)p->nbufs, sizeof(int));
    memset(b->host_of, 0xff, (size_t)p->nbufs * sizeof(int));
    for (int i = 0; i < p->noffl; i++)
        b->host_of[p->offl[i].dev] = p->offl[i].host;
}

static void mark_sent(PB *b)
{
    Plan *p = b->p;
    b->sent = arena_array(b->a, (size_t)p->nbufs, sizeof(bool));
    for (int i = 0; i < p->nbufs; i++)
        if (p->bufs[i].received)
            b->sent[plan_buf(p, p->bufs[i].value, b->st->home[p->bufs[i].value])] = true;
}

int plan_buf(const Plan *p, uint32_t v, int stage)
{
    return p->buf_of[(size_t)v * p->st->n + stage];
}

int plan_read(const Plan *p, uint32_t v, int stage, int kind)
{
    int f = kind == ACT_BWD || kind == ACT_WGRAD ? p->fetch_of[(size_t)v * p->st->n + stage] : -1;
    return f >= 0 ? f : plan_buf(p, v, stage);
}

int plan_home_buf(const Plan *p, uint32_t v)
{
    if (p->whost_of && p->whost_of[v] >= 0)
        return p->whost_of[v];
    return p->st->home[v] < 0 ? -1 : plan_buf(p, v, p->st->home[v]);
}

bool plan_offload_copy(const Plan *p, int b)
{
    const Buf *bf = &p->bufs[b];
    return bf->host || (bf->from >= 0 && p->bufs[bf->from].host);
}

/* ---- micro-batch lifetimes and slots ---- */

static void touch(PB *b, int buf, int mb, int pos)
{
    int *f = &b->first_use[(size_t)buf * b->M + mb], *l = &b->last_use[(size_t)buf * b->M + mb];
    if (*f < 0 || pos < *f)
        *f = pos;
    if (pos > *l)
        *l = pos;
}

/* The update reads the summed gradient when there is one, not the last
 * micro-batch's. */
static bool reads_gradient_sum(const PB *b, const Node *n, uint32_t k)
{
    return n->phase == PH_UPDATE && k == 1 && b->p->acc_of[n->in[0]] >= 0;
}

/* A recomputing stage rewrites its forward values in the backward pass:
 * between its forward and its backward they hold nothing anyone reads,
 * unless another stage receives them. */
static bool rewritten(const PB *b, uint32_t v, int stage)
{
    uint32_t pn = b->g->values[v].producer;
    return b->st->recompute[stage] && pn != NONE && b->g->nodes[pn].phase == PH_FORWARD &&
           b->st->stage[pn] == stage && !b->sent[plan_buf(b->p, v, stage)];
}

/* The buffers the nodes of action `kind` of a's stage touch, at position i. */
static void touch_action(PB *b, Act a, int kind, int i)
{
    Plan *p = b->p;
    size_t k = (size_t)a.stage * ACT_KINDS + kind;
    for (int j = 0; j < p->nnodes[k]; j++) {
        const Node *nd = &b->g->nodes[p->nodes[k][j]];
        for (uint32_t q = 0; q < nd->nin; q++)
            if (nd->in[q] != NONE && !reads_gradient_sum(b, nd, q) &&
                !(a.kind == ACT_FWD && rewritten(b, nd->in[q], a.stage)))
                touch(b, plan_read(p, nd->in[q], a.stage, kind), a.mb, i);
        for (uint32_t q = 0; q < nd->nout; q++)
            if (nd->out[q] != NONE && !(a.kind == ACT_FWD && rewritten(b, nd->out[q], a.stage)))
                touch(b, plan_buf(p, nd->out[q], a.stage), a.mb, i);
    }
}

static void lifetimes(PB *b)
{
    Plan *p = b->p;
    size_t n = (size_t)p->nbufs * b->M;
    b->first_use = arena_array(b->a, n, sizeof(int));
    b->last_use = arena_array(b->a, n, sizeof(int));
    memset(b->first_use, 0xff, n * sizeof(int));
    memset(b->last_use, 0xff, n * sizeof(int));
    b->run_pos = arena_array(b->a, (size_t)b->S * ACT_KINDS * b->M, sizeof(int));
    for (int d = 0; d < b->sc->ndev; d++)
        for (int i = 0; i < b->sc->nseq[d]; i++) {
            Act a = b->sc->seq[d][i];
            b->run_pos[act_key(b, a.kind, a.stage, a.mb)] = i;
            touch_action(b, a, a.kind, i);
            if (a.kind == ACT_BWD && b->st->recompute[a.stage])
                touch_action(b, a, ACT_FWD, i);   /* the forward it reruns */
        }
    for (int i = 0; i < p->noffl; i++)   /* an offloaded value lives on through its copies */
        for (int mb = 0; mb < b->M; mb++) {
            touch(b, p->offl[i].dev, mb, p->offl[i].out_during[mb]);
            touch(b, p->offl[i].fetched, mb, p->offl[i].in_during[mb]);
        }
}

/* Micro-batches alive at once: lifetimes start and end in micro-batch
 * order, so it is the most that overlap one lifetime's end. */
static int live_at_once(const PB *b, int buf)
{
    const int *f = &b->first_use[(size_t)buf * b->M], *l = &b->last_use[(size_t)buf * b->M];
    int most = 1;
    for (int m = 0; m < b->M; m++) {
        if (f[m] < 0)
            continue;
        if (m > 0 && (f[m] < f[m - 1] || l[m] < l[m - 1]))
            return b->M;   /* not in order: every micro-batch its own slot */
        int k = 1;
        while (m + k < b->M && f[m + k] >= 0 && f[m + k] <= l[m])
            k++;
        if (k > most)
            most = k;
    }
    return most;
}

static void choose_slots(PB *b)
{
    Plan *p = b->p;
    for (int i = 0; i < p->nbufs; i++) {
        Buf *buf = &p->bufs[i];
        if (buf->acc || !slotted(b->g, buf->value))
            continue;
        if (buf->host) {   /* every micro-batch its own: nothing waits for a host slot */
            buf->slots = b->M;
            continue;
        }
        int k = live_at_once(b, i) + (buf->received || b->sent[i]);
        if ((b->g->values[buf->value].kind == VK_INPUT && !buf->received) ||
            (b->own_slots && (buf->received || b->sent[i])))
            k = b->M;   /* the host fills every micro-batch before the step */
        buf->slots = k < b->M ? k : b->M;
    }
}

/* One scratch area per device: its kernels run one at a time, on the
 * compute stream. A GPU's ends with a slot of SLOT_BYTES for each
 * AdamW update and each Dropout call it runs in a step: the step's numbers
 * the kernel reads (runtime/cuda.c, mprt_cu_slot). */
enum { SLOT_BYTES = 32 };

/* How many slots node id takes in a step: an AdamW update one, a Dropout
 * (or its gradient) one a micro-batch, twice where its stage recomputes. */
static size_t node_slots(const PB *b, uint32_t id)
{
    Op op = b->g->nodes[id].op;
    if (op == OP_ADAMW)
        return 1;
    if (op != OP_DROPOUT && op != OP_DROPOUT_GRAD)
        return 0;
    return (size_t)b->M * (b->st->recompute[b->st->stage[id]] ? 2 : 1);
}

static void place_workspace(PB *b)
{
    Plan *p = b->p;
    int ndev = b->sc->ndev;
    p->work_offset = arena_array(b->a, (size_t)ndev, sizeof(size_t));
    p->work_bytes = arena_array(b->a, (size_t)ndev, sizeof(size_t));
    size_t *slots = p->slot_bytes = arena_array(b->a, (size_t)ndev, sizeof(size_t));
    for (uint32_t i = 0; i < b->g->norder; i++) {
        uint32_t id = b->g->order[i];
        if (b->st->stage[id] < 0)
            continue;
        int d = b->st->dev[b->st->stage[id]];
        bool cpu = b->p->ds->d[d].kind == DEV_CPU;
        size_t w = round64((size_t)node_workspace(b->g, &b->g->nodes[id], cpu));
        p->work_bytes[d] = w > p->work_bytes[d] ? w : p->work_bytes[d];
        if (!cpu)
            slots[d] += SLOT_BYTES * node_slots(b, id);
    }
    for (int d = 0; d < ndev; d++) {
        p->work_bytes[d] += slots[d];
        p->work_offset[d] = p->arena_bytes[d];
        p->arena_bytes[d] += p->work_bytes[d];
    }
}

/* ---- operations ---- */

static int new_op(PB *b, PlanOp op)
{
    Plan *p = b->p;
    if (p->nops == b->cap_ops) {
        int cap = b->cap_ops ? 2 * b->cap_ops : 256;
        p->ops = arena_grow(b->a, p->ops, (size_t)p->nops, (size_t)cap, sizeof(PlanOp));
        b->cap_ops = cap;
    }
    op.event = -1;
    p->ops[p->nops] = op;
    return p->nops++;
}

static void add_dep(PB *b, int op, int dep)
{
    PlanOp *o = &b->p->ops[op];
    if (dep < 0 || b->p->ops[dep].stream == o->stream)
        return;
    for (int i = 0; i < o->ndeps; i++)
        if (o->deps[i] == dep)
            return;
    o->deps = arena_grow(b->a, o->deps, (size_t)o->ndeps, (size_t)o->ndeps + 1, sizeof(int));
    o->deps[o->ndeps++] = dep;
}

/* An action's predicted time: its stage's figure for it, less what its
 * fused chains save (cost.c). */
static double action_time(const PB *b, Act a)
{
    const Plan *p = b->p;
    size_t k = (size_t)a.stage * ACT_KINDS + a.kind;
    const Profile *prof = &p->ds->d[b->st->dev[a.stage]].prof;
    double t = b->st->time[k];
    if (a.kind == ACT_UPDATE)   /* --zero=1: the updated weights' all-gather */
        t += zero_gather_seconds(b->o, p->ds, stage_grad_bytes(b->g, b->st, a.stage));
    for (int j = 0; j < p->nnodes[k]; j++)
        t -= fused_saving(b->g, &b->g->nodes[p->nodes[k][j]], p->fu, prof, b->st->measured);
    return t > 0 ? t : 0;
}

/* ---- the last gradient action in parts (--data-parallel) ---- */

uint32_t plan_grad_writer(const Plan *p, uint32_t v)
{
    uint32_t id = p->g->values[p->g->values[v].grad].producer;
    return p->fu && p->fu->tail[id] != NONE ? p->fu->tail[id] : id;
}

/* Where a bucket's gradients are done in its stage's last gradient
 * action: after the last node that writes one of them (the chain's last
 * where fused), -1 where none is written there (an earlier action did). */
static void bucket_cuts(PB *b)
{
    Plan *p = b->p;
    for (int k = 0; k < p->nbuckets; k++) {
        Bucket *bk = &p->buckets[k];
        size_t a = (size_t)bk->stage * ACT_KINDS + p->last_grad[bk->stage];
        const uint32_t *upd = p->nodes[(size_t)bk->stage * ACT_KINDS + ACT_UPDATE];
        bk->cut = -1;
        for (int i = bk->first; i < bk->first + bk->count; i++) {
            uint32_t id = plan_grad_writer(p, b->g->nodes[upd[i]].in[0]);
            for (int j = 0; j < p->nnodes[a]; j++)
                if (p->nodes[a][j] == id && j > bk->cut)
                    bk->cut = j;
        }
    }
}

/* Each stage with buckets runs its last micro-batch's last gradient
 * action in parts that end where buckets are done (not under --offload,
 * whose windows are whole actions). */
static void split_actions(PB *b)
{
    Plan *p = b->p;
    p->nparts = arena_array(b->a, (size_t)b->S, sizeof(int));
    p->part_end = arena_array(b->a, (size_t)b->S, sizeof(int *));
    b->part_op = arena_array(b->a, (size_t)b->S, sizeof(int *));
    for (int s = 0; s < b->S; s++) {
        int n = p->nnodes[(size_t)s * ACT_KINDS + p->last_grad[s]];
        p->part_end[s] = arena_array(b->a, (size_t)n + 1, sizeof(int));
        for (int k = 0; k < p->nbuckets && !p->noffl && !p->nwofl; k++) {
            int end = p->buckets[k].cut + 1, at = 0;
            if (p->buckets[k].stage != s || end <= 0 || end >= n)
                continue;
            while (at < p->nparts[s] && p->part_end[s][at] < end)
                at++;
            if (at < p->nparts[s] && p->part_end[s][at] == end)
                continue;
            memmove(&p->part_end[s][at + 1], &p->part_end[s][at],
                    (size_t)(p->nparts[s] - at) * sizeof(int));
            p->part_end[s][at] = end;
            p->nparts[s]++;
        }
        p->part_end[s][p->nparts[s]++] = n;
        b->part_op[s] = arena_array(b->a, (size_t)p->nparts[s], sizeof(int));
    }
}

/* The share of the action's predicted time that its nodes lo .. hi - 1
 * take (a recomputing backward's forward again with its first part). */
static double part_share(const PB *b, Act a, int lo, int hi)
{
    const Plan *p = b->p;
    const Profile *prof = &p->ds->d[b->st->dev[a.stage]].prof;
    size_t k = (size_t)a.stage * ACT_KINDS + a.kind, f = (size_t)a.stage * ACT_KINDS + ACT_FWD;
    bool again = a.kind == ACT_BWD && b->st->recompute[a.stage];
    double part = 0, all = 0;
    for (int j = 0; again && j < p->nnodes[f]; j++) {
        double t = node_time(b->g, &b->g->nodes[p->nodes[f][j]], prof, b->st->measured);
        all += t, part += lo == 0 ? t : 0;
    }
    for (int j = 0; j < p->nnodes[k]; j++) {
        double t = node_time(b->g, &b->g->nodes[p->nodes[k][j]], prof, b->st->measured);
        all += t, part += j >= lo && j < hi ? t : 0;
    }
    return all > 0 ? part / all : (double)(hi - lo) / (p->nnodes[k] ? p->nnodes[k] : 1);
}

static void run_ops(PB *b)
{
    Plan *p = b->p;
    b->run_op = arena_array(b->a, (size_t)b->S * ACT_KINDS * b->M, sizeof(int));
    for (int d = 0; d < b->sc->ndev; d++)
        for (int i = 0, pos = 0; i < b->sc->nseq[d]; i++) {
            Act a = b->sc->seq[d][i];
            bool split = a.mb == b->M - 1 && a.kind != ACT_UPDATE &&
                         a.kind == p->last_grad[a.stage];
            int parts = split ? p->nparts[a.stage] : 1;
            for (int q = 0, lo = 0; q < parts; q++) {
                double share = parts > 1 ? part_share(b, a, lo, p->part_end[a.stage][q]) : 1;
                PlanOp op = {.kind = OPK_RUN, .dev = d, .stream = d * STREAMS_PER_DEV,
                             .pos = pos++, .act = a, .part = q,
                             .time = action_time(b, a) * share + 1e-9};
                int id = new_op(b, op);
                b->run_op[act_key(b, a.kind, a.stage, a.mb)] = id;
                if (split)
                    b->part_op[a.stage][q] = id;
                lo = p->part_end[a.stage][q];
            }
        }
}

typedef struct CopyKey {
    double key;
    int op;
} CopyKey;

static int by_key(const void *x, const void *y)
{
    const CopyKey *a = x, *c = y;
    if (a->key != c->key)
        return a->key < c->key ? -1 : 1;
    return a->op - c->op;
}

/* Where a copy of (home buffer, mb) goes in its stream: right after the
 * action producing it; an input's, just before its stage's forward. */
static double copy_key(const PB *b, uint32_t v, int home, int mb)
{
    uint32_t pn = b->g->values[v].producer;
    if (pn == NONE)
        return b->run_pos[act_key(b, ACT_FWD, home, mb)] - 0.5;
    return b->run_pos[act_key(b, b->st->act[pn], home, mb)];
}

static double copy_time(const PB *b, const Buf *src, const Buf *dst)
{
    const Devices *ds = b->p->ds;
    double bytes = (double)dst->bytes;
    if (src->host || dst->host) {   /* between a device and its host memory */
        const Profile *pr = &ds->d[src->dev].prof;
        return pr->host_latency + bytes / pr->host_bw + 1e-9;
    }
    if (src->dev == dst->dev)
        return bytes / ds->d[src->dev].prof.bandwidth + 1e-9;
    return link_latency(ds, src->dev, dst->dev) + bytes / link_bandwidth(ds, src->dev, dst->dev) +
           1e-9;
}

/* A copy of buffer src's micro-batch mb into dst, on copy stream `stream`
 * of device dev. */
static int new_copy(PB *b, int dev, int stream, int src, int dst, int mb)
{
    const Buf *bufs = b->p->bufs;
    PlanOp op = {.kind = OPK_COPY, .dev = dev, .stream = dev * STREAMS_PER_DEV + stream,
                 .src = src, .dst = dst, .mb = mb, .time = copy_time(b, &bufs[src], &bufs[dst])};
    return new_op(b, op);
}

/* An offloaded value's copies, out on the device's forward copy stream
 * after its forward, and back on the backward one after the action before
 * the window it runs in. */
static int offload_copies(PB *b, const Offload *f, CopyKey *keys, int nk)
{
    Plan *p = b->p;
    int dev = p->bufs[f->dev].dev;
    for (int mb = 0; mb < b->M; mb++)
        for (int back = 0; back < 2; back++) {
            int src = back ? f->host : f->dev, dst = back ? f->fetched : f->host;
            int id = new_copy(b, dev, back ? STREAM_SEND_BWD : STREAM_SEND_FWD, src, dst, mb);
            b->copy_op[(size_t)dst * b->M + mb] = id;
            double key = back ? f->in_during[mb] - 1 : copy_key(b, f->value, f->stage, mb);
            keys[nk++] = (CopyKey){key, id};
        }
    return nk;
}

/* An offloaded weight's copies: in on the device's backward copy stream
 * while the action before each window runs (after the one before that),
 * back on the forward one after a window that writes it. */
static int streamed_copies(PB *b, Streamed *w, CopyKey *keys, int nk)
{
    Plan *p = b->p;
    int dev = p->bufs[w->dev].dev;
    for (int k = 0; k < w->nwin; k++)
        for (int back = 0; back < 1 + w->written[k]; back++) {
            int src = back ? w->dev : w->host, dst = back ? w->host : w->dev;
            int id = new_copy(b, dev, back ? STREAM_SEND_FWD : STREAM_SEND_BWD, src, dst, k);
            *(back ? &w->evict_op[k] : &w->fetch_op[k]) = id;
            keys[nk++] = (CopyKey){back ? w->last[k] : w->first[k] - 2, id};
        }
    return nk;
}

static void copy_ops(PB *b)
{
    Plan *p = b->p;
    b->copy_op = arena_array(b->a, (size_t)p->nbufs * b->M, sizeof(int));
    size_t nkeys = (size_t)p->nbufs * b->M + 1;
    for (int i = 0; i < p->nwofl; i++)
        nkeys += 2 * (size_t)p->wofl[i].nwin;
    CopyKey *keys = arena_array(b->a, nkeys, sizeof(CopyKey));
    int nk = 0;
    for (int i = 0; i < p->noffl; i++)
        nk = offload_copies(b, &p->offl[i], keys, nk);
    for (int i = 0; i < p->nwofl; i++)
        nk = streamed_copies(b, &p->wofl[i], keys, nk);
    for (int r = 0; r < p->nbufs; r++) {
        if (!p->bufs[r].received)
            continue;
        uint32_t v = p->bufs[r].value;
        int home = b->st->home[v], src = plan_buf(p, v, home);
        uint32_t pn = b->g->values[v].producer;
        bool back = pn != NONE && b->g->nodes[pn].phase != PH_FORWARD;
        int dev = b->st->dev[home];
        for (int mb = 0; mb < b->M; mb++) {
            int id = new_copy(b, dev, back ? STREAM_SEND_BWD : STREAM_SEND_FWD, src, r, mb);
            b->copy_op[(size_t)r * b->M + mb] = id;
            keys[nk++] = (CopyKey){copy_key(b, v, home, mb), id};
        }
    }
    qsort(keys, (size_t)nk, sizeof *keys, by_key);
    int *next = arena_array(b->a, (size_t)p->nstreams, sizeof(int));
    for (int i = 0; i < nk; i++) {
        PlanOp *op = &p->ops[keys[i].op];
        op->pos = next[op->stream]++;
    }
}

/* ---- dependencies ---- */

static void copy_deps(PB *b, int r)
{
    Plan *p = b->p;
    const Buf *dst = &p->bufs[r];
    uint32_t pn = b->g->values[dst->value].producer;
    int home = b->st->home[dst->value];
    for (int mb = 0; mb < b->M; mb++) {
        int op = b->copy_op[(size_t)r * b->M + mb];
        if (pn != NONE)
            add_dep(b, op, b->run_op[act_key(b, b->st->act[pn], home, mb)]);
        int prev = mb - dst->slots;   /* the slot's previous micro-batch */
        if (prev >= 0) {
            int last = b->last_use[(size_t)r * b->M + prev];
            MPCC_ASSERT(last >= 0);
            Act a = b->sc->seq[dst->dev][last];
            add_dep(b, op, b->run_op[act_key(b, a.kind, a.stage, a.mb)]);
        }
    }
}

/* The run op of action i of device dev's sequence. */
static int run_at(const PB *b, int dev, int i)
{
    Act a = b->sc->seq[dev][i];
    return b->run_op[act_key(b, a.kind, a.stage, a.mb)];
}

/* An offloaded value's copy out waits for its forward; its copy back for
 * the copy out and for the action before its window; the action after the
 * copy out's window waits for it. */
static void offload_deps(PB *b, const Offload *f)
{
    const Plan *p = b->p;
    int dev = p->bufs[f->dev].dev;
    for (int mb = 0; mb < b->M; mb++) {
        int out = b->copy_op[(size_t)f->host * b->M + mb];
        int in = b->copy_op[(size_t)f->fetched * b->M + mb];
        add_dep(b, out, b->run_op[act_key(b, ACT_FWD, f->stage, mb)]);
        add_dep(b, in, out);
        if (f->in_during[mb] > 0) {
            Act a = b->sc->seq[dev][f->in_during[mb] - 1];
            add_dep(b, in, b->run_op[act_key(b, a.kind, a.stage, a.mb)]);
        }
        if (f->out_during[mb] + 1 < b->sc->nseq[dev]) {
            Act a = b->sc->seq[dev][f->out_during[mb] + 1];
            add_dep(b, b->run_op[act_key(b, a.kind, a.stage, a.mb)], out);
        }
    }
}

/* An offloaded weight's copy in waits for the action two before its
 * window (the one before runs beside it) and for the copy back of the
 * window before; the window's first action waits for it. Its copy back
 * waits for the window's last action, and the action after the one it
 * runs beside waits for it. */
static void streamed_deps(PB *b, const Streamed *w)
{
    const Plan *p = b->p;
    int dev = p->bufs[w->dev].dev, n = b->sc->nseq[dev];
    for (int k = 0; k < w->nwin; k++) {
        if (w->first[k] >= 2)
            add_dep(b, w->fetch_op[k], run_at(b, dev, w->first[k] - 2));
        if (k > 0)
            add_dep(b, w->fetch_op[k], w->evict_op[k - 1]);
        add_dep(b, run_at(b, dev, w->first[k]), w->fetch_op[k]);
        if (w->evict_op[k] < 0)
            continue;
        add_dep(b, w->evict_op[k], run_at(b, dev, w->last[k]));
        if (w->last[k] + 2 < n)
            add_dep(b, run_at(b, dev, w->last[k] + 2), w->evict_op[k]);
    }
}

/* The copies out that run beside action i of a device may still run when
 * those in that run beside action i + 1 start (each waits only for the
 * action before its own), and share.c lets the memory they reach overlap:
 * each copy in waits for the last copy out of the action before (they
 * share the device's forward copy stream, so that one implies the rest). */
static void keep_latest(const Plan *p, int *last, int n, int i, int op)
{
    if (i < n && op >= 0 && (last[i] < 0 || p->ops[op].pos > p->ops[last[i]].pos))
        last[i] = op;
}

static void boundary_deps(PB *b)
{
    Plan *p = b->p;
    for (int d = 0; d < b->sc->ndev; d++) {
        int n = b->sc->nseq[d];
        int *last = arena_array(b->a, (size_t)n + 1, sizeof(int));
        memset(last, 0xff, ((size_t)n + 1) * sizeof(int));
        for (int k = 0; k < p->noffl; k++)
            for (int mb = 0; mb < b->M && p->bufs[p->offl[k].dev].dev == d; mb++)
                keep_latest(p, last, n, p->offl[k].out_during[mb],
                            b->copy_op[(size_t)p->offl[k].host * b->M + mb]);
        for (int k = 0; k < p->nwofl; k++)
            for (int w = 0; w < p->wofl[k].nwin && p->bufs[p->wofl[k].dev].dev == d; w++)
                keep_latest(p, last, n, streamed_evict_during(&p->wofl[k], w),
                            p->wofl[k].evict_op[w]);
        for (int k = 0; k < p->noffl; k++)
            for (int mb = 0; mb < b->M && p->bufs[p->offl[k].dev].dev == d; mb++) {
                int i = p->offl[k].in_during[mb];
                if (i > 0 && last[i - 1] >= 0)
                    add_dep(b, b->copy_op[(size_t)p->offl[k].fetched * b->M + mb], last[i - 1]);
            }
        for (int k = 0; k < p->nwofl; k++)
            for (int w = 0; w < p->wofl[k].nwin && p->bufs[p->wofl[k].dev].dev == d; w++) {
                int i = streamed_fetch_during(&p->wofl[k], w);
                if (i > 0 && last[i - 1] >= 0)
                    add_dep(b, p->wofl[k].fetch_op[w], last[i - 1]);
            }
    }
}

/* Before an action writes a slot, the copies reading the slot's previous
 * micro-batch must be done. */
static void overwrite_deps(PB *b, int op, int buf, int mb)
{
    Plan *p = b->p;
    int prev = mb - p->bufs[buf].slots;
    if (prev >= 0 && b->host_of[buf] >= 0)
        add_dep(b, op, b->copy_op[(size_t)b->host_of[buf] * b->M + prev]);
    if (!b->sent[buf] || prev < 0)
        return;
    uint32_t v = p->bufs[buf].value;
    for (int s = 0; s < b->S; s++) {
        int r = plan_buf(p, v, s);
        if (r >= 0 && p->bufs[r].received)
            add_dep(b, op, b->copy_op[(size_t)r * b->M + prev]);
    }
}

/* A recomputing backward rewrites the values its forward sent: the copies
 * of this micro-batch must be done first. */
static void rewrite_deps(PB *b, int op)
{
    Plan *p = b->p;
    Act a = p->ops[op].act;
    size_t k = (size_t)a.stage * ACT_KINDS + ACT_FWD;
    for (int j = 0; j < p->nnodes[k]; j++) {
        const Node *n = &b->g->nodes[p->nodes[k][j]];
        for (uint32_t q = 0; q < n->nout; q++) {
            if (n->out[q] == NONE || !b->sent[plan_buf(p, n->out[q], a.stage)])
                continue;
            for (int s = 0; s < b->S; s++) {
                int r = plan_buf(p, n->out[q], s);
                if (r >= 0 && p->bufs[r].received)
                    add_dep(b, op, b->copy_op[(size_t)r * b->M + a.mb]);
            }
        }
    }
}

static void run_deps(PB *b, int op)
{
    Plan *p = b->p;
    Act a = p->ops[op].act;
    if (a.kind == ACT_BWD && b->st->recompute[a.stage])
        rewrite_deps(b, op);
    size_t k = (size_t)a.stage * ACT_KINDS + a.kind;
    for (int j = 0; j < p->nnodes[k]; j++) {
        const Node *n = &b->g->nodes[p->nodes[k][j]];
        for (uint32_t q = 0; q < n->nin; q++) {
            int r = n->in[q] == NONE ? -1 : plan_read(p, n->in[q], a.stage, a.kind);
            if (r >= 0 && p->bufs[r].from >= 0 && !p->bufs[r].streamed)
                add_dep(b, op, b->copy_op[(size_t)r * b->M + a.mb]);
        }
        for (uint32_t q = 0; q < n->nout; q++)
            if (n->out[q] != NONE)
                overwrite_deps(b, op, plan_buf(p, n->out[q], a.stage), a.mb);
    }
}

/* --clip-norm: the gradient norm is global, so each update waits for the
 * last micro-batch's backward (and weight gradients) of every stage, and
 * with replicas for every sum (which takes the norms of what it sums). */
static void norm_deps(PB *b, int op)
{
    for (int s = 0; s < b->S; s++) {
        add_dep(b, op, b->run_op[act_key(b, ACT_BWD, s, b->M - 1)]);
        if (b->sc->kind == SCHED_ZB)
            add_dep(b, op, b->run_op[act_key(b, ACT_WGRAD, s, b->M - 1)]);
    }
    for (int k = 0; k < b->p->nbuckets; k++)
        add_dep(b, op, b->sum_op[k]);
}

/* --data-parallel: each device's communication stream sums its stages'
 * buckets in the order their last gradient actions run, bucket after
 * bucket; a sum waits for the part of that action after which its
 * gradients are done (split_actions), and the stage's update for it. */
static void sum_ops(PB *b)
{
    Plan *p = b->p;
    b->sum_op = arena_array(b->a, (size_t)p->nbuckets + 1, sizeof(int));
    for (int d = 0; d < b->sc->ndev; d++) {
        int pos = 0;
        for (int i = 0; i < b->sc->nseq[d]; i++) {
            Act a = b->sc->seq[d][i];
            if (a.mb != b->M - 1 || a.kind == ACT_UPDATE || a.kind != p->last_grad[a.stage])
                continue;
            int update = b->run_op[act_key(b, ACT_UPDATE, a.stage, 0)];
            for (int k = 0; k < p->nbuckets; k++) {
                const Bucket *bk = &p->buckets[k];
                if (bk->stage != a.stage)
                    continue;
                int q = 0;   /* the part after which its gradients are done */
                while (p->part_end[a.stage][q] <= bk->cut)
                    q++;
                int last = b->part_op[a.stage][q];
                PlanOp op = {.kind = OPK_SUM, .dev = d, .stream = d * STREAMS_PER_DEV + STREAM_COMM,
                             .pos = pos++, .act = {.kind = ACT_UPDATE, .stage = a.stage},
                             .src = -1, .dst = -1, .mb = bk->index, .bucket = k,
                             .time = replica_sum_seconds(b->o, p->ds, bk->bytes) + 1e-9};
                b->sum_op[k] = new_op(b, op);
                add_dep(b, b->sum_op[k], last);
                add_dep(b, update, b->sum_op[k]);
            }
        }
    }
}

static void add_deps(PB *b)
{
    Plan *p = b->p;
    for (int r = 0; r < p->nbufs; r++)
        if (p->bufs[r].received ||
            (p->bufs[r].from >= 0 && !p->bufs[r].host && !p->bufs[r].streamed))
            copy_deps(b, r);
    for (int i = 0; i < p->noffl; i++)
        offload_deps(b, &p->offl[i]);
    for (int i = 0; i < p->nwofl; i++)
        streamed_deps(b, &p->wofl[i]);
    boundary_deps(b);
    for (int i = 0; i < p->nops; i++) {
        if (p->ops[i].kind != OPK_RUN)
            continue;
        run_deps(b, i);
        if (p->global_norm && p->ops[i].act.kind == ACT_UPDATE)
            norm_deps(b, i);
    }
}

/* ---- issue order and events ---- */

/* The host issues operations in order of predicted start, each stream in
 * its own order and every operation after those it waits for: then every
 * wait names an event recorded earlier in the host's order. */
static int *issue_perm(PB *b)
{
    Plan *p = b->p;
    int *count = arena_array(b->a, (size_t)p->nstreams, sizeof(int));
    int *head = arena_array(b->a, (size_t)p->nstreams, sizeof(int));
    for (int i = 0; i < p->nops; i++)
        count[p->ops[i].stream]++;
    int **list = arena_array(b->a, (size_t)p->nstreams, sizeof(int *));
    for (int s = 0; s < p->nstreams; s++)
        list[s] = arena_array(b->a, (size_t)count[s] + 1, sizeof(int));
    for (int i = 0; i < p->nops; i++)
        list[p->ops[i].stream][p->ops[i].pos] = i;
    bool *issued = arena_array(b->a, (size_t)p->nops + 1, sizeof(bool));
    int *perm = arena_array(b->a, (size_t)p->nops + 1, sizeof(int));
    for (int n = 0; n < p->nops; n++) {
        int pick = -1;
        for (int s = 0; s < p->nstreams; s++) {
            if (head[s] == count[s])
                continue;
            const PlanOp *op = &p->ops[list[s][head[s]]];
            bool ready = true;
            for (int k = 0; k < op->ndeps && ready; k++)
                ready = issued[op->deps[k]];
            if (ready && (pick < 0 || op->start < p->ops[list[pick][head[pick]]].start))
                pick = s;
        }
        MPCC_ASSERT(pick >= 0);   /* the simulation ran them all */
        perm[n] = list[pick][head[pick]++];
        issued[perm[n]] = true;
    }
    return perm;
}

/* A pipeline across processes under --clip-norm: an update keeps its wait
 * for every stage's last gradients, implied or not. The trainer drops
 * the waits on another process's (their norms come over MPI,
 * runtime/comm.c's mprt_norms_across), and what remains must still cover
 * this process's stages. */
static bool keeps_norm_waits(const Plan *p, const PlanOp *op, bool across)
{
    return across && p->global_norm && op->kind == OPK_RUN && op->act.kind == ACT_UPDATE;
}

/* Drops each wait that others imply: one for an operation that an earlier
 * operation of the same stream, or another wait of this one, already
 * follows (streams run in order). Vector clocks over the issue order: the
 * last position of each stream that an operation follows. */
static void prune_waits(PB *b)
{
    Plan *p = b->p;
    int S = p->nstreams;
    int *clock = arena_array(b->a, (size_t)p->nops * S + 1, sizeof(int));
    int *last = arena_array(b->a, (size_t)S, sizeof(int));
    memset(last, 0xff, (size_t)S * sizeof(int));
    bool across = plan_across_nodes(p);
    for (int i = 0; i < p->nops; i++) {
        PlanOp *op = &p->ops[i];
        bool keep = keeps_norm_waits(p, op, across);
        int *c = &clock[(size_t)i * S];
        if (last[op->stream] >= 0)
            memcpy(c, &clock[(size_t)last[op->stream] * S], (size_t)S * sizeof(int));
        else
            memset(c, 0xff, (size_t)S * sizeof(int));
        int n = 0;
        for (int k = 0; k < op->ndeps; k++) {
            const PlanOp *d = &p->ops[op->deps[k]];
            bool implied = !keep && c[d->stream] >= d->pos;
            for (int j = 0; j < op->ndeps && !implied && !keep; j++)
                implied = j != k && clock[(size_t)op->deps[j] * S + d->stream] >= d->pos;
            if (!implied)
                op->deps[n++] = op->deps[k];
        }
        op->ndeps = n;
        for (int k = 0; k < n; k++)
            for (int t = 0; t < S; t++)
                if (clock[(size_t)op->deps[k] * S + t] > c[t])
                    c[t] = clock[(size_t)op->deps[k] * S + t];
        c[op->stream] = op->pos;
        last[op->stream] = i;
    }
}

static void issue_order(PB *b)
{
    Plan *p = b->p;
    int *perm = issue_perm(b);
    int *where = arena_array(b->a, (size_t)p->nops + 1, sizeof(int));
    PlanOp *ops = arena_array(b->a, (size_t)p->nops + 1, sizeof(PlanOp));
    for (int i = 0; i < p->nops; i++) {
        ops[i] = p->ops[perm[i]];
        where[perm[i]] = i;
    }
    for (int i = 0; i < p->nops; i++)
        for (int k = 0; k < ops[i].ndeps; k++)
            ops[i].deps[k] = where[ops[i].deps[k]];
    p->ops = ops;
    prune_waits(b);
    for (int i = 0; i < p->nops; i++)
        for (int k = 0; k < ops[i].ndeps; k++) {
            PlanOp *dep = &ops[ops[i].deps[k]];
            MPCC_ASSERT(ops[i].deps[k] < i);
            if (dep->event < 0)
                dep->event = p->nevents++;
        }
}

/* ---- the entry points: the driver runs them in order, with fusion,
 * placement (share.c), simulation (sim.c) and the checks between ---- */

static PB *builder(Plan *p)
{
    MPCC_ASSERT(p->build);
    return p->build;
}

/* Slots shared between micro-batches make copies wait for readers; where
 * a copy stream's order then blocks (a copy waits for a slot while copies
 * behind it are what frees it), the transfer buffers get a slot for every
 * micro-batch instead (own_slots), and nothing waits for a slot. */
Plan *plan_buffers(Graph *g, const Stages *st, const Schedule *sc, const Devices *ds,
                   const Options *o, bool own_slots)
{
    Plan *p = arena_alloc(g->arena, sizeof *p);
    *p = (Plan){.g = g, .st = st, .sc = sc, .ds = ds, .nstreams = sc->ndev * STREAMS_PER_DEV,
                .global_norm = o->train.clip_norm > 0 && !o->infer};
    PB *b = arena_alloc(g->arena, sizeof *b);
    *b = (PB){.p = p, .g = g, .st = st, .sc = sc, .a = g->arena, .S = st->n, .M = sc->M,
              .own_slots = own_slots, .tree = replicas_tree(o)};
    Options *keep = arena_alloc(g->arena, sizeof *keep);   /* sum_ops prices with it */
    *keep = *o;
    b->o = keep;
    p->build = b;
    collect_nodes(b);
    plan_buckets(p, o);
    make_bufs(b);
    shard_optimizer_state(b, o);
    make_offload(b, o);
    mark_sent(b);
    return p;
}

void plan_slots(Plan *p)
{
    lifetimes(builder(p));
    choose_slots(builder(p));
}

void plan_workspace(Plan *p)
{
    place_workspace(builder(p));
}

void plan_ops(Plan *p)
{
    PB *b = builder(p);
    bucket_cuts(b);
    split_actions(b);
    run_ops(b);
    sum_ops(b);
    copy_ops(b);
    add_deps(b);
}

void plan_order(Plan *p)
{
    issue_order(builder(p));
    p->build = NULL;   /* done: what it kept is no longer needed */
}
