/* stages.c — from the training graph to stages: every node gets a stage
 * (and so a device) and the action that runs it.
 *
 * The forward nodes, in topological order, are the units the partitioner
 * cuts into contiguous stages (partition.c, or --split). A backward node
 * goes with the forward node whose gradient made it (Node.origin), an
 * update with its parameter, so a forward op's gradient runs on its device.
 * A stage's backward splits into the input-gradient part (B: what earlier
 * stages wait for) and the weight-gradient part (W) when the schedule
 * runs them apart (zero-bubble); otherwise all of it is B.
 */
#include "mpcc.h"

#include <stdlib.h>
#include <string.h>

typedef struct Build {
    Graph *g;
    const Options *o;
    const Devices *ds;
    const Measured *m;
    Stages *st;
    int *unit;             /* [nnodes]: the unit a node belongs to, -1 if none */
    int *unit_pos;         /* [nnodes]: forward node -> its unit index */
    Reject *rej;           /* why the candidate cannot run, when it cannot */
} Build;

/* Whether a CPU device may hold a unit: its oneDNN scratch then counts
 * (a mixed plan's CUDA devices are charged it too, on the safe side). */
static bool any_cpu(const Devices *ds)
{
    for (int d = 0; d < ds->n; d++)
        if (ds->d[d].kind == DEV_CPU)
            return true;
    return false;
}

/* ---- units ---- */

static void add_unit(Build *b, uint32_t id)
{
    Stages *st = b->st;
    if (b->unit[id] >= 0)
        return;
    const Node *n = &b->g->nodes[id];
    for (uint32_t k = 0; k < n->nin; k++) {   /* deferred producers first */
        uint32_t p = n->in[k] == NONE ? NONE : b->g->values[n->in[k]].producer;
        if (p != NONE && b->g->nodes[p].phase == PH_FORWARD)
            add_unit(b, p);
    }
    b->unit[id] = b->unit_pos[id] = st->nunits;
    st->units[st->nunits++] = id;
}

/* Whether each forward node reads, through its inputs, a graph input. */
static bool *reads_data(Build *b)
{
    Graph *g = b->g;
    bool *dep = arena_array(g->arena, g->nvalues, sizeof(bool));
    bool *node_dep = arena_array(g->arena, g->nnodes, sizeof(bool));
    for (uint32_t v = 0; v < g->nvalues; v++)
        dep[v] = g->values[v].kind == VK_INPUT;
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *n = &g->nodes[g->order[i]];
        for (uint32_t k = 0; k < n->nin; k++)
            node_dep[g->order[i]] |= n->in[k] != NONE && dep[n->in[k]];
        for (uint32_t k = 0; k < n->nout; k++)
            if (n->out[k] != NONE)
                dep[n->out[k]] = node_dep[g->order[i]];
    }
    return node_dep;
}

static int hint_stage(Build *b, const Node *n);

typedef struct Keyed {
    int key;
    uint32_t pos, id;
} Keyed;

static int by_key(const void *x, const void *y)
{
    const Keyed *a = x, *c = y;
    if (a->key != c->key)
        return a->key - c->key;
    return (int)a->pos - (int)c->pos;
}

/* The forward nodes sorted by the latest stage any of them or their
 * ancestors is pinned to, then by topological position: still a
 * topological order (the key never decreases along an edge), and one in
 * which placement hints can be met by contiguous cuts (two branches pinned
 * to two devices come one after the other, not interleaved). */
static uint32_t *pinned_order(Build *b)
{
    Graph *g = b->g;
    int *key = arena_array(g->arena, g->nvalues, sizeof(int));
    Keyed *k = arena_array(g->arena, g->norder + 1, sizeof(Keyed));
    uint32_t n = 0;
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *nd = &g->nodes[g->order[i]];
        if (nd->phase != PH_FORWARD)
            continue;
        int kk = hint_stage(b, nd);
        for (uint32_t j = 0; j < nd->nin; j++)
            if (nd->in[j] != NONE && key[nd->in[j]] > kk)
                kk = key[nd->in[j]];
        for (uint32_t j = 0; j < nd->nout; j++)
            if (nd->out[j] != NONE)
                key[nd->out[j]] = kk;
        k[n++] = (Keyed){kk, i, g->order[i]};
    }
    qsort(k, n, sizeof *k, by_key);
    uint32_t *order = arena_array(g->arena, g->norder + 1, sizeof(uint32_t));
    for (uint32_t i = 0; i < g->norder; i++)
        order[i] = i < n ? k[i].id : NONE;
    return order;
}

/* The units in topological order, with the nodes that read no data (a
 * weight's transpose, a shape computation) moved to just before their
 * first reader, so no stage computes them for another. */
static void find_units(Build *b)
{
    Graph *g = b->g;
    Stages *st = b->st;
    b->unit = arena_array(g->arena, g->nnodes, sizeof(int));
    b->unit_pos = arena_array(g->arena, g->nnodes, sizeof(int));
    /* each node at most once: the order's, and the forward producers they
     * pull in that the order does not list */
    st->units = arena_array(g->arena, g->nnodes + 1, sizeof(uint32_t));
    for (uint32_t i = 0; i < g->nnodes; i++)
        b->unit[i] = b->unit_pos[i] = -1;
    bool *data = reads_data(b);
    uint32_t *order = pinned_order(b);
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = 0; i < g->norder; i++) {
            uint32_t id = order[i];
            if (id != NONE && (data[id] || pass == 1))
                add_unit(b, id);
        }
}

/* The unit of the node producing v, or -1 for a value no node produces. */
static int producer_unit(const Build *b, uint32_t v)
{
    uint32_t p = b->g->values[v].producer;
    return p == NONE ? -1 : b->unit[p];
}

/* A backward node joins its origin's unit; a node without one (a
 * parameter's gradient sum) joins the last unit among its inputs'. */
static void backward_units(Build *b)
{
    Graph *g = b->g;
    for (uint32_t i = 0; i < g->norder; i++) {
        uint32_t id = g->order[i];
        const Node *n = &g->nodes[id];
        if (n->phase != PH_BACKWARD)
            continue;
        int u = n->origin != NONE ? b->unit[n->origin] : -1;
        for (uint32_t k = 0; u < 0 && k < n->nin; k++)
            if (n->in[k] != NONE && producer_unit(b, n->in[k]) > u)
                u = producer_unit(b, n->in[k]);
        MPCC_ASSERT(u >= 0);
        b->unit[id] = u;
    }
}

/* The first unit reading a parameter or input. */
static int *first_readers(Build *b, int *last)
{
    Graph *g = b->g;
    int *first = arena_array(g->arena, g->nvalues, sizeof(int));
    for (uint32_t v = 0; v < g->nvalues; v++)
        first[v] = last[v] = -1;
    for (int u = 0; u < b->st->nunits; u++) {
        const Node *n = &g->nodes[b->st->units[u]];
        for (uint32_t k = 0; k < n->nin; k++) {
            uint32_t v = n->in[k];
            if (v == NONE)
                continue;
            if (first[v] < 0)
                first[v] = u;
            last[v] = u;
        }
    }
    return first;
}

/* ---- the partitioning problem ---- */

static size_t vbytes(const Graph *g, uint32_t v)
{
    return (size_t)shape_numel(&g->values[v].shape) * dtype_size(g->values[v].dtype);
}

static int state_per_param(const Options *o)
{
    int k = 2 + (o->train.microbatches > 1);   /* the weight, its gradient, its sum */
    if (o->train.optim == OPTIM_ADAMW)
        return k + 2;
    return k + (o->train.momentum != 0);
}

/* Whether a backward node of unit u reads value v: then u's stage keeps v
 * for every micro-batch in flight. The (value, unit) pairs, sorted. */
typedef struct Kept {
    uint64_t *pair;
    size_t n;
} Kept;

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, c = *(const uint64_t *)y;
    return (a > c) - (a < c);
}

static Kept kept_for_backward(Build *b)
{
    Graph *g = b->g;
    Kept k = {.pair = NULL, .n = 0};
    size_t cap = 0;
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *n = &g->nodes[g->order[i]];
        if (n->phase != PH_BACKWARD || n->origin == NONE || b->unit[n->origin] < 0)
            continue;
        for (uint32_t j = 0; j < n->nin; j++) {
            if (n->in[j] == NONE)
                continue;
            if (k.n == cap) {
                k.pair = arena_grow(g->arena, k.pair, k.n, cap * 2 + 64, sizeof *k.pair);
                cap = cap * 2 + 64;
            }
            k.pair[k.n++] = (uint64_t)n->in[j] << 32 | (uint32_t)b->unit[n->origin];
        }
    }
    if (k.n)
        qsort(k.pair, k.n, sizeof *k.pair, cmp_u64);
    return k;
}

static bool kept(const Kept *k, uint32_t v, int u)
{
    uint64_t key = (uint64_t)v << 32 | (uint32_t)u;
    return k->n && bsearch(&key, k->pair, k->n, sizeof *k->pair, cmp_u64);
}

/* The memory of a unit is a lower bound of what the memory plan gives it,
 * so that the partitioner never rejects a stage the plan would fit (the
 * plan's own verdict comes after, in pipeline.c): the weights with their
 * gradients, sums and optimizer state (memory of their own), the largest
 * scratch, and per micro-batch in flight the outputs its backward reads
 * (alive from the forward to the backward, so never sharing memory with
 * one another). Under --recompute a stage may keep only its inputs. */
static void unit_costs(Build *b, PartProblem *p, const int *first, const Kept *k)
{
    Graph *g = b->g;
    int n = p->n;
    bool recompute = b->o->pipe.recompute != RECOMPUTE_NONE;
    double *time = arena_array(g->arena, (size_t)p->ndev * n, sizeof(double));
    int64_t *fixed = arena_array(g->arena, (size_t)n, sizeof(int64_t));
    int64_t *act = arena_array(g->arena, (size_t)n, sizeof(int64_t));
    int64_t *work = arena_array(g->arena, (size_t)n, sizeof(int64_t));
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *node = &g->nodes[g->order[i]];
        int u = b->unit[g->order[i]];
        if (u < 0)
            continue;
        for (int d = 0; d < p->ndev; d++)
            time[d * n + u] += node_time(g, node, &b->ds->d[d].prof, b->m);
        int64_t w = node_workspace(g, node, any_cpu(b->ds));
        work[u] = w > work[u] ? w : work[u];
        if (node->phase == PH_FORWARD && !recompute)
            for (uint32_t j = 0; j < node->nout; j++)
                if (node->out[j] != NONE && kept(k, node->out[j], u))
                    act[u] += (int64_t)vbytes(g, node->out[j]);
    }
    /* offloaded, a weight and its state may leave the device: its gradients stay */
    bool out = offloads_weights(b->o->pipe.offload);
    for (uint32_t v = 0; v < g->nvalues; v++)
        if (g->values[v].kind == VK_PARAM && first[v] >= 0 && (g->values[v].trainable || !out))
            fixed[first[v]] += (int64_t)vbytes(g, v) *
                               (!g->values[v].trainable ? 1
                                : out ? 1 + (b->o->train.microbatches > 1)
                                      : state_per_param(b->o));
    p->time = time;
    p->fixed_mem = fixed;
    p->act_mem = act;
    p->work_mem = work;
}

/* A value a stage receives is kept for its micro-batches in flight where
 * every unit reading it has a backward that reads it too (so whichever
 * stage it enters keeps it), or under --recompute=all (stage inputs are
 * what a recomputing stage keeps); otherwise its memory is not counted. */
static bool transient(const Build *b, const Kept *k, uint32_t v, const int *cons, int nc)
{
    if (b->o->pipe.recompute == RECOMPUTE_ALL)
        return false;
    for (int c = 0; c < nc; c++)
        if (!kept(k, v, cons[c]))
            return true;
    return false;
}

/* Activations and inputs read by forward units: what a cut may send. */
static void cut_values(Build *b, PartProblem *p, const Kept *kp)
{
    Graph *g = b->g;
    int *count = arena_array(g->arena, g->nvalues, sizeof(int));
    for (int u = 0; u < p->n; u++) {
        const Node *n = &g->nodes[b->st->units[u]];
        for (uint32_t k = 0; k < n->nin; k++)
            if (n->in[k] != NONE)
                count[n->in[k]]++;
    }
    PartValue *pv = arena_array(g->arena, g->nvalues, sizeof(PartValue));
    int nv = 0;
    for (uint32_t v = 0; v < g->nvalues; v++) {
        ValueKind k = g->values[v].kind;
        if (!count[v] || (k != VK_ACTIVATION && k != VK_INPUT))
            continue;
        int *cons = arena_array(g->arena, (size_t)count[v], sizeof(int));
        int nc = 0;
        for (int u = 0; u < p->n; u++) {
            const Node *n = &g->nodes[b->st->units[u]];
            for (uint32_t j = 0; j < n->nin; j++)
                if (n->in[j] == v && (nc == 0 || cons[nc - 1] != u))
                    cons[nc++] = u;
        }
        pv[nv++] = (PartValue){producer_unit(b, v), (double)vbytes(g, v), cons, nc,
                               transient(b, kp, v, cons, nc)};
    }
    p->values = pv;
    p->nvalues = nv;
}

/* The unit of the backward node computing trainable v's gradient, -1 if none.
 * It can come after v's last reader: Add passes its output's gradient on
 * unchanged, so a bias added by Add gets the next node's input gradient. */
static int gradient_unit(const Build *b, uint32_t v)
{
    const Value *val = &b->g->values[v];
    if (!val->trainable || val->grad == NONE || b->g->values[val->grad].producer == NONE)
        return -1;
    return b->unit[b->g->values[val->grad].producer];
}

/* A parameter stays on one stage: no cut between its first and last reader,
 * nor before the unit computing its gradient, which its update (and the
 * sum over micro-batches) follows to its stage. */
static bool *param_cuts(Build *b, int n, const int *first, const int *last)
{
    Graph *g = b->g;
    bool *no_cut = arena_array(g->arena, (size_t)n, sizeof(bool));
    for (uint32_t v = 0; v < g->nvalues; v++) {
        if ((g->values[v].kind != VK_PARAM && g->values[v].kind != VK_STATE) || first[v] < 0)
            continue;
        int end = last[v], grad = gradient_unit(b, v);
        end = grad > end ? grad : end;
        for (int u = first[v]; u < end; u++)
            no_cut[u] = true;
    }
    return no_cut;
}

static int stages_on(const Stages *st, int d)
{
    int k = 0;
    for (int s = 0; s < st->n; s++)
        k += st->dev[s] == d;
    return k;
}

/* A placement hint names a device; it pins the unit to that device's stage
 * (-1: no hint, or one this candidate cannot honour, rejected). */
static int hint_stage(Build *b, const Node *n)
{
    Arena *a = b->g->arena;
    if (n->hint_stage >= b->st->n) {
        reject(a, b->rej, &n->loc, "the placement hint names stage %d, but there are %d "
               "stages (stages count from 0)", (int)n->hint_stage, b->st->n);
        return -1;
    }
    if (n->hint_stage >= 0 || !n->hint_device)
        return n->hint_stage;
    int found = -1, matches = 0;
    for (int d = 0; d < b->ds->n; d++) {
        const Device *dev = &b->ds->d[d];
        bool kind_only = strchr(n->hint_device, ':') == NULL;
        const char *kind = dev->kind == DEV_CPU ? "cpu" : "cuda";
        if (kind_only ? strcmp(kind, n->hint_device) == 0
                      : strcmp(dev->name, n->hint_device) == 0)
            found = d, matches++;
    }
    if (matches == 0) {
        const char *list = "";
        for (int d = 0; d < b->ds->n; d++)
            list = arena_printf(a, "%s%s%s", list, d ? ", " : "", b->ds->d[d].name);
        reject(a, b->rej, &n->loc, "the placement hint names %s, which the command line did "
               "not give (devices: %s; add it with --devices)", n->hint_device, list);
    } else if (matches > 1) {
        reject(a, b->rej, &n->loc, "the placement hint '%s' matches %d devices; name one "
               "(%s:0)", n->hint_device, matches, n->hint_device);
    } else if (stages_on(b->st, found) != 1) {
        reject(a, b->rej, &n->loc, "with %d stages on %s, pin to a stage (@stage) rather than "
               "a device", stages_on(b->st, found), b->ds->d[found].name);
    } else {
        for (int s = 0; s < b->st->n; s++)
            if (b->st->dev[s] == found)
                return s;
    }
    return -1;
}

static int *unit_pins(Build *b, int n)
{
    int *pin = arena_array(b->g->arena, (size_t)n, sizeof(int));
    for (int u = 0; u < n; u++)
        pin[u] = hint_stage(b, &b->g->nodes[b->st->units[u]]);
    return pin;
}

static int inflight(SchedKind k, int s, int S, int M)
{
    int f = k == SCHED_GPIPE ? M : S - s;
    return f < M ? f : M;
}

static void set_links(Build *b, PartProblem *p)
{
    int nd = b->ds->n;
    double *bw = arena_array(b->g->arena, (size_t)nd * nd, sizeof(double));
    double *lat = arena_array(b->g->arena, (size_t)nd * nd, sizeof(double));
    for (int i = 0; i < nd; i++)
        for (int j = 0; j < nd; j++) {
            bw[i * nd + j] = i == j ? 1e30 : link_bandwidth(b->ds, i, j);
            lat[i * nd + j] = i == j ? 0 : link_latency(b->ds, i, j);
        }
    p->link_bw = bw;
    p->link_latency = lat;
}

static PartProblem make_problem(Build *b, SchedKind kind, int M, const Exclusions *ex)
{
    Stages *st = b->st;
    PartProblem p = {.n = st->nunits, .nstages = st->n, .ndev = b->ds->n, .M = M,
                     .stage_dev = st->dev};
    int *last = arena_array(b->g->arena, b->g->nvalues, sizeof(int));
    int *first = first_readers(b, last);
    Kept k = kept_for_backward(b);
    unit_costs(b, &p, first, &k);
    cut_values(b, &p, &k);
    if (ex) {
        p.excluded = ex->t;
        p.nexcluded = ex->n;
    }
    p.no_cut = param_cuts(b, p.n, first, last);
    p.pin = unit_pins(b, p.n);
    int *infl = arena_array(b->g->arena, (size_t)st->n, sizeof(int));
    int64_t *cap = arena_array(b->g->arena, (size_t)st->n, sizeof(int64_t));
    for (int s = 0; s < st->n; s++) {
        /* offloaded, what a stage keeps may leave the device: no bound */
        infl[s] = offloads_activations(b->o->pipe.offload) ? 0 : inflight(kind, s, st->n, M);
        cap[s] = b->ds->d[st->dev[s]].prof.memory / stages_on(st, st->dev[s]);
    }
    p.inflight = infl;
    p.mem_cap = cap;
    set_links(b, &p);
    return p;
}

/* ---- choosing the cuts ---- */

/* The unit of the forward node named `name`, or of the batch norm that
 * took in the Relu, or the residual Add, of that name (graph/simplify.c):
 * cutting after either is cutting after it. */
static int unit_named(Build *b, const char *name)
{
    for (int u = 0; u < b->st->nunits; u++) {
        const Node *n = &b->g->nodes[b->st->units[u]];
        const char *relu = n->op == OP_BATCH_NORM ? bn_relu(n) : NULL;
        const char *add = n->op == OP_BATCH_NORM ? bn_add(n) : NULL;
        if (strcmp(n->name, name) == 0 || (relu && strcmp(relu, name) == 0) ||
            (add && strcmp(add, name) == 0))
            return u;
    }
    reject_file(b->g->arena, b->rej, b->g->file, "--split: no forward node is named '%s' "
                "(mpcc --dump=ir lists the nodes)", name);
    return -1;
}

/* The cuts --split gives; false (rejected) when they do not make this
 * candidate's stages. */
static bool manual_cuts(Build *b, const PartProblem *p, PartResult *r)
{
    Arena *a = b->g->arena;
    Stages *st = b->st;
    char *copy = arena_strdup(b->g->arena, b->o->pipe.split);
    int *first = arena_array(b->g->arena, (size_t)st->n + 1, sizeof(int));
    int k = 1;
    for (char *w = strtok(copy, ","); w; w = strtok(NULL, ",")) {
        if (k >= st->n)
            return reject_file(a, b->rej, b->g->file, "--split names more than %d cut(s); %d "
                               "stages need %d", st->n - 1, st->n, st->n - 1);
        int u = unit_named(b, w);
        if (u < 0)
            return false;
        first[k] = u + 1;
        if (first[k] <= first[k - 1] || first[k] >= st->nunits)
            return reject_file(a, b->rej, b->g->file, "--split: '%s' must come after the "
                               "previous cut in topological order and before the last node", w);
        if (p->no_cut[first[k] - 1])
            return reject_file(a, b->rej, b->g->file, "--split: cutting after '%s' would "
                               "separate the readers of one parameter, or them from its "
                               "gradient; cut elsewhere", w);
        k++;
    }
    if (k != st->n)
        return reject_file(a, b->rej, b->g->file, "--split gives %d cut(s); %d stages need %d",
                           k - 1, st->n, st->n - 1);
    first[st->n] = st->nunits;
    for (int u = 0, s = 0; p->pin && u < st->nunits; u++) {
        while (u >= first[s + 1])
            s++;
        if (p->pin[u] >= 0 && p->pin[u] != s)
            return reject(a, b->rej, &b->g->nodes[st->units[u]].loc, "--split puts this node "
                          "on stage %d, but its placement hint pins it to stage %d; cut "
                          "elsewhere or drop the hint", s, p->pin[u]);
    }
    part_eval(a, p, first, r);
    return true;
}

static bool report_infeasible(Build *b, const PartResult *r)
{
    if (r->worst_stage < 0)
        return reject_file(b->g->arena, b->rej, b->g->file, "the placement hints and shared "
                           "parameters leave no way to cut the model into %d stages", b->st->n);
    const Device *d = &b->ds->d[b->st->dev[r->worst_stage]];
    bool fresh = !b->rej->why;   /* the first reason stays (vreject) */
    reject_file(b->g->arena, b->rej, b->g->file, "the model does not fit: at best, "
                       "stage %d needs at least %.1f MB on %s, which has %.1f MB for it; add "
                       "devices, lower -batch, raise --microbatches, or use --recompute or "
                       "--offload=all",
                       r->worst_stage, (double)r->worst_need / 1e6, d->name,
                       (double)(d->prof.memory / stages_on(b->st, b->st->dev[r->worst_stage])) /
                       1e6);
    b->rej->memory |= fresh;
    return false;
}

/* ---- nodes to stages and actions ---- */

/* B: the backward nodes whose results another stage waits for, and what
 * they need; every other backward node of the stage is W. */
static void split_backward(Build *b)
{
    Graph *g = b->g;
    Stages *st = b->st;
    bool *needed = arena_array(g->arena, g->nvalues, sizeof(bool));
    for (uint32_t i = 0; i < g->norder; i++) {
        const Node *n = &g->nodes[g->order[i]];
        if (n->phase == PH_FORWARD)
            continue;
        for (uint32_t k = 0; k < n->nin; k++) {
            uint32_t v = n->in[k];
            if (v != NONE && g->values[v].producer != NONE &&
                st->stage[g->values[v].producer] != st->stage[g->order[i]])
                needed[v] = true;
        }
    }
    for (uint32_t i = g->norder; i-- > 0;) {
        uint32_t id = g->order[i];
        const Node *n = &g->nodes[id];
        if (n->phase != PH_BACKWARD)
            continue;
        bool b_part = false;
        for (uint32_t k = 0; k < n->nout; k++)
            b_part |= n->out[k] != NONE && needed[n->out[k]];
        st->act[id] = b_part ? ACT_BWD : ACT_WGRAD;
        if (b_part)
            for (uint32_t k = 0; k < n->nin; k++)
                if (n->in[k] != NONE)
                    needed[n->in[k]] = true;
    }
}

static void assign_nodes(Build *b, const int *first, bool split)
{
    Graph *g = b->g;
    Stages *st = b->st;
    int *stage_of_unit = arena_array(g->arena, (size_t)st->nunits, sizeof(int));
    for (int s = 0; s < st->n; s++)
        for (int u = first[s]; u < first[s + 1]; u++)
            stage_of_unit[u] = s;
    for (uint32_t i = 0; i < g->nnodes; i++)
        st->stage[i] = -1;
    for (uint32_t i = 0; i < g->norder; i++) {
        uint32_t id = g->order[i];
        const Node *n = &g->nodes[id];
        if (n->phase == PH_UPDATE) {
            uint32_t grad = n->in[1];
            st->stage[id] = st->stage[g->values[grad].producer];
            st->act[id] = ACT_UPDATE;
            continue;
        }
        st->stage[id] = (int16_t)stage_of_unit[b->unit[id]];
        st->act[id] = n->phase == PH_FORWARD ? ACT_FWD : ACT_BWD;
    }
    if (split)
        split_backward(b);
}

/* Where each value lives: with its producer; a parameter or its state with
 * the stage updating it (or reading it, when frozen); an input with its
 * first reader; constants in every stage that reads them (-1). */
static void place_values(Build *b)
{
    Graph *g = b->g;
    Stages *st = b->st;
    for (uint32_t v = 0; v < g->nvalues; v++)
        st->home[v] = -1;
    for (uint32_t i = 0; i < g->norder; i++) {
        uint32_t id = g->order[i];
        const Node *n = &g->nodes[id];
        for (uint32_t k = 0; k < n->nout; k++)
            if (n->out[k] != NONE)
                st->home[n->out[k]] = st->stage[id];
        for (uint32_t k = 0; k < n->nin; k++) {
            uint32_t v = n->in[k];
            if (v == NONE || g->values[v].kind == VK_CONST || g->values[v].kind == VK_ACTIVATION)
                continue;
            if (st->home[v] < 0 || (n->phase == PH_UPDATE && g->values[v].kind != VK_INPUT))
                st->home[v] = st->stage[id];
        }
    }
}

static void stage_figures(Build *b)
{
    Graph *g = b->g;
    Stages *st = b->st;
    st->time = arena_array(g->arena, (size_t)st->n * ACT_KINDS, sizeof(double));
    st->flops = arena_array(g->arena, (size_t)st->n, sizeof(double));
    st->params = arena_array(g->arena, (size_t)st->n, sizeof(int64_t));
    for (uint32_t i = 0; i < g->norder; i++) {
        uint32_t id = g->order[i];
        const Node *n = &g->nodes[id];
        int s = st->stage[id];
        st->time[s * ACT_KINDS + st->act[id]] +=
            node_time(g, n, &b->ds->d[st->dev[s]].prof, b->m);
        if (n->phase != PH_UPDATE)
            st->flops[s] += node_cost(g, n, &b->ds->d[st->dev[s]].prof).flops;
    }
    for (uint32_t v = 0; v < g->nvalues; v++)
        if (g->values[v].kind == VK_PARAM && g->values[v].trainable && st->home[v] >= 0)
            st->params[st->home[v]] += shape_numel(&g->values[v].shape);
}

/* The partitioner and the memory plan add up bytes: of every tensor and
 * every node's scratch, for each micro-batch in flight, with the optimizer's
 * copies of the weights. A model for which that would come near int64's
 * range is far beyond any device: an error here, before any sum. */
static bool check_size(const Build *b, int M)
{
    const Graph *g = b->g;
    double total = 0;
    for (uint32_t v = 0; v < g->nvalues; v++) {
        int64_t bytes;
        if (g->values[v].typed && shape_bytes(&g->values[v].shape, g->values[v].dtype, &bytes))
            total += (double)bytes;
    }
    for (uint32_t i = 0; i < g->norder; i++)
        total += (double)node_workspace(g, &g->nodes[g->order[i]], true);
    if (total * (M + 8) >= 0x1p62)
        return reject_file(g->arena, b->rej, g->file, "the training graph's tensors and scratch "
                           "take %.3g bytes with %d micro-batch(es) in flight: far more than "
                           "any device holds; lower -batch or the model's sizes", total, M);
    return true;
}

static bool solve(Arena *a, const Options *o, const PartProblem *p, PartResult *r)
{
    if (o->pipe.objective == OBJECTIVE_MEMORY)
        return part_solve_memory(a, p, r);
    return part_solve(a, p, r);
}

static Stages *refused(Reject *rej, const Reject *mine)
{
    *rej = *mine;
    return NULL;
}

Stages *stages_build(Graph *g, const Options *o, const Devices *ds, const Measured *m,
                     SchedKind kind, int virt, int M, const Exclusions *ex, Reject *rej)
{
    Stages *st = arena_alloc(g->arena, sizeof *st);
    st->measured = m;
    Reject mine = {0};   /* this call's reason; rej keeps the caller's until there is one */
    Build b = {.g = g, .o = o, .ds = ds, .m = m, .st = st, .rej = &mine};
    if (!check_size(&b, M))
        return refused(rej, &mine);
    st->n = ds->n * (kind == SCHED_INTERLEAVED ? virt : 1);
    st->dev = arena_array(g->arena, (size_t)st->n, sizeof(int));
    for (int s = 0; s < st->n; s++)
        st->dev[s] = s % ds->n;
    find_units(&b);
    backward_units(&b);
    if (st->nunits < st->n) {
        reject_file(g->arena, &mine, g->file, "the model has %d forward nodes, too few for %d "
                    "stages; use fewer devices", st->nunits, st->n);
        return refused(rej, &mine);
    }
    PartProblem p = make_problem(&b, kind, M, ex);
    if (mine.why)
        return refused(rej, &mine);   /* a placement hint this candidate cannot honour */
    PartResult r;
    if (o->pipe.cuts) {   /* given by unit (pipeline.c's refinement) */
        if (!part_eval(g->arena, &p, o->pipe.cuts, &r)) {
            reject_file(g->arena, &mine, g->file, "the cuts separate a parameter's readers, "
                        "break a placement hint or do not fit");
            return refused(rej, &mine);
        }
    } else if (o->pipe.split) {
        if (!manual_cuts(&b, &p, &r))
            return refused(rej, &mine);
    } else if (!solve(g->arena, o, &p, &r) && ex && ex->n) {
        return NULL;   /* what is left the memory plan measured over its device: rej says */
    } else if (!r.feasible) {
        report_infeasible(&b, &r);
        return refused(rej, &mine);
    }
    st->part = r;
    st->recompute = arena_array(g->arena, (size_t)st->n, sizeof(bool));
    st->stage = arena_array(g->arena, g->nnodes, sizeof(int16_t));
    st->act = arena_array(g->arena, g->nnodes, sizeof(uint8_t));
    st->home = arena_array(g->arena, g->nvalues, sizeof(int16_t));
    st->first = r.first;
    assign_nodes(&b, r.first, kind == SCHED_ZB);
    place_values(&b);
    stage_figures(&b);
    return st;
}
