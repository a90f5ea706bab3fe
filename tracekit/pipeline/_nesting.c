/* The enclosing-range sweep of the link step (tracekit/nesting.py), as one stack loop in C.
 *
 * sweep(order, pid, tid, start, end, is_range, flags, op, top, mod, bwd, comm, bits)
 *
 * A transcription of nesting.sweep_loop, the reference: the elements are visited in ``order``
 * (their sweep order: by thread, start, longest first, ranges first); on each thread a stack of
 * open ranges is popped while its top ends at or before the element's start, the top's context
 * is the element's, and a range pushes its own context (itself as the innermost op / module /
 * backward node / collective, and the inherited bits). Results are written by element index.
 *
 * Every argument is a C-contiguous buffer of int64 (``is_range``: one byte per element), all of
 * the same length n; ``order`` must be a permutation of 0..n-1 (checked). The six outputs are
 * written in place. No Python object is made per element and the GIL is released in the loop.
 * Optional: without it (no compiler), nesting.sweep runs its vectorised numpy form.
 *
 * parents() and walk() give a point set (memory events, idle gaps, critical-path pieces) the
 * context this sweep would give it, from the ranges' own context (tracekit/pipeline/points.py):
 * the sweep's stack as parent links found once per trace, walked per point. Their sorted
 * positions (the ranges' order and the links) are int32: a trace has fewer than 2^31 ranges.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Range flags and context bits: the values of tracekit/nesting.py. */
#define F_OP (1 << 0)
#define F_MODULE (1 << 1)
#define F_OPT (1 << 2)
#define F_EVAL (1 << 3)
#define F_BWD (1 << 4)
#define F_COMM (1 << 5)
#define F_ROPE (1 << 6)
#define MOD_IN_BWD (1 << 20)
#define INHERITED (F_OPT | F_EVAL | F_ROPE)

typedef struct {
    int64_t end;
    int64_t op, top, mod, bwd, comm, bits;
} Frame;

#define N_IN 7
#define N_OUT 6

/* 0 on success; -1 with order not a permutation; -2 out of memory. */
static int run(Py_ssize_t n, const int64_t *order, const int64_t *pid, const int64_t *tid,
               const int64_t *start, const int64_t *end, const uint8_t *is_range,
               const int64_t *flags, int64_t *const *out) {
    Frame *stack = NULL;
    Py_ssize_t depth = 0, cap = 0;
    int64_t cur_pid = 0, cur_tid = 0;
    int have = 0;
    uint8_t *seen = calloc(n > 0 ? (size_t)n : 1, 1);
    if (!seen) return -2;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t i = order[k];
        if (i < 0 || i >= n || seen[i]) {
            free(stack);
            free(seen);
            return -1;
        }
        seen[i] = 1;
        if (!have || pid[i] != cur_pid || tid[i] != cur_tid) {
            depth = 0;
            cur_pid = pid[i];
            cur_tid = tid[i];
            have = 1;
        }
        int64_t ts = start[i];
        while (depth > 0 && stack[depth - 1].end <= ts) depth--;
        Frame ctx = {0, -1, -1, -1, -1, -1, 0};
        if (depth > 0) ctx = stack[depth - 1];
        out[0][i] = ctx.op;
        out[1][i] = ctx.top;
        out[2][i] = ctx.mod;
        out[3][i] = ctx.bwd;
        out[4][i] = ctx.comm;
        out[5][i] = ctx.bits;
        if (!is_range[i]) continue;
        int64_t f = flags[i];
        if (f & F_MODULE) {
            ctx.mod = i;
            ctx.top = -1;
            ctx.bits |= MOD_IN_BWD;
        }
        if (f & F_OP) {
            ctx.op = i;
            if (ctx.top == -1) ctx.top = i;
        }
        if (f & F_BWD) {
            ctx.bwd = i;
            ctx.bits &= ~(int64_t)MOD_IN_BWD;
        }
        if (f & F_COMM) ctx.comm = i;
        ctx.bits |= f & INHERITED;
        ctx.end = end[i];
        if (depth == cap) {
            Py_ssize_t grown = cap ? 2 * cap : 64;
            Frame *s = realloc(stack, (size_t)grown * sizeof(Frame));
            if (!s) {
                free(stack);
                free(seen);
                return -2;
            }
            stack = s;
            cap = grown;
        }
        stack[depth++] = ctx;
    }
    free(stack);
    free(seen);
    return 0;
}

static PyObject *sweep(PyObject *self, PyObject *args) {
    Py_buffer in[N_IN], out[N_OUT];
    memset(in, 0, sizeof in);
    memset(out, 0, sizeof out);
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*w*w*w*w*w*w*", &in[0], &in[1], &in[2], &in[3],
                          &in[4], &in[5], &in[6], &out[0], &out[1], &out[2], &out[3], &out[4],
                          &out[5]))
        return NULL;
    Py_ssize_t n = in[0].len / 8;
    int ok = in[0].len % 8 == 0 && in[5].len == n;
    for (int j = 1; j < N_IN; j++)
        if (j != 5 && in[j].len != n * 8) ok = 0;
    for (int j = 0; j < N_OUT; j++)
        if (out[j].len != n * 8) ok = 0;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "sweep: buffers of different lengths");
        goto done;
    }
    int64_t *dst[N_OUT];
    for (int j = 0; j < N_OUT; j++) dst[j] = (int64_t *)out[j].buf;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = run(n, (const int64_t *)in[0].buf, (const int64_t *)in[1].buf, (const int64_t *)in[2].buf,
             (const int64_t *)in[3].buf, (const int64_t *)in[4].buf, (const uint8_t *)in[5].buf,
             (const int64_t *)in[6].buf, dst);
    Py_END_ALLOW_THREADS
    if (rc == -1) {
        PyErr_SetString(PyExc_ValueError, "sweep: order is not a permutation");
        goto done;
    }
    if (rc == -2) {
        PyErr_NoMemory();
        goto done;
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    for (int j = 0; j < N_IN; j++) PyBuffer_Release(&in[j]);
    for (int j = 0; j < N_OUT; j++) PyBuffer_Release(&out[j]);
    return result;
}

/* parents(order, pid, tid, start, end, parent): the stack sweep over ranges alone (every element
 * a range), recording for sorted position x the sorted position of the range on top of the
 * stack when range order[x] is pushed (-1: empty stack). The stack at any later time of the
 * thread is then a chain of these links (points push nothing, and their pops are ones the next
 * range would make anyway): see walk(). 0 on success; -1 order not a permutation; -2 memory. */
static int run_parents(Py_ssize_t n, const int32_t *order, const int64_t *pid, const int64_t *tid,
                       const int64_t *start, const int64_t *end, int32_t *parent) {
    int32_t *stack = malloc((n > 0 ? (size_t)n : 1) * sizeof(int32_t));
    uint8_t *seen = calloc(n > 0 ? (size_t)n : 1, 1);
    if (!stack || !seen) {
        free(stack);
        free(seen);
        return -2;
    }
    Py_ssize_t depth = 0;
    for (Py_ssize_t x = 0; x < n; x++) {
        int64_t i = order[x];
        if (i < 0 || i >= n || seen[i]) {
            free(stack);
            free(seen);
            return -1;
        }
        seen[i] = 1;
        if (x == 0 || pid[i] != pid[order[x - 1]] || tid[i] != tid[order[x - 1]]) depth = 0;
        while (depth > 0 && end[order[stack[depth - 1]]] <= start[i]) depth--;
        parent[x] = depth > 0 ? stack[depth - 1] : -1;
        stack[depth++] = (int32_t)x; /* depth <= x < n <= INT32_MAX: within the n slots */
    }
    free(stack);
    free(seen);
    return 0;
}

/* walk(by, at, ts, order, parent, end, flags, op, top, mod, bwd, comm, bits, <6 outputs>): per
 * point k, the context the sweep gives it. The point is reached with the stack its thread's
 * last range before it left (sorted position at[k], -1 none), popped while the top ends at or
 * before ts[k]: start at at[k] and follow parent links past ranges that have ended; the first
 * open range's row i = order[x] pushes its frame (its own context op..bits[i], with i itself
 * as innermost op / module / backward node / collective by flags[i], as run() pushes it); no
 * open range: the empty context. Points are visited in the order ``by`` (a permutation of the
 * m points, checked); a point whose at equals the previous visited point's, with ts not
 * earlier, continues from where that walk stopped (the links it passed end before this point
 * too), so points visited by position and time cost O(points + ranges) at most. Links must
 * point to earlier positions (checked: every walk ends). 0 ok; -1 bad input; -2 memory. */
typedef struct {
    const int64_t *flags, *op, *top, *mod, *bwd, *comm, *bits;
} Ctx;

static void frame_of(const Ctx *c, int64_t i, int64_t *const *out, int64_t k) {
    int64_t f = c->flags[i], op = c->op[i], top = c->top[i], mod = c->mod[i], bwd = c->bwd[i];
    int64_t comm = c->comm[i], bits = c->bits[i];
    if (f & F_MODULE) {
        mod = i;
        top = -1;
        bits |= MOD_IN_BWD;
    }
    if (f & F_OP) {
        op = i;
        if (top == -1) top = i;
    }
    if (f & F_BWD) {
        bwd = i;
        bits &= ~(int64_t)MOD_IN_BWD;
    }
    if (f & F_COMM) comm = i;
    bits |= f & INHERITED;
    out[0][k] = op;
    out[1][k] = top;
    out[2][k] = mod;
    out[3][k] = bwd;
    out[4][k] = comm;
    out[5][k] = bits;
}

static int run_walk(Py_ssize_t m, Py_ssize_t n, const int64_t *by, const int64_t *at, const int64_t *ts,
                    const int32_t *order, const int64_t *end, const int32_t *parent, const Ctx *c,
                    int64_t *const *out) {
    uint8_t *seen = calloc(m > 0 ? (size_t)m : 1, 1);
    if (!seen) return -2;
    int64_t prev_at = -1, prev_ts = 0, prev_x = -1;
    int rc = 0;
    for (Py_ssize_t j = 0; j < m && rc == 0; j++) {
        int64_t k = by[j];
        if (k < 0 || k >= m || seen[k]) {
            rc = -1;
            break;
        }
        seen[k] = 1;
        int64_t x = at[k], t = ts[k];
        if (x < -1 || x >= n) {
            rc = -1;
            break;
        }
        if (x >= 0 && x == prev_at && t >= prev_ts) x = prev_x;
        prev_at = at[k];
        prev_ts = t;
        int64_t i = -1;
        while (x >= 0) {
            i = order[x];
            if (i < 0 || i >= n) {
                rc = -1;
                break;
            }
            if (end[i] > t) break;
            int64_t up = parent[x];
            if (up < -1 || up >= x) {
                rc = -1;
                break;
            }
            x = up;
        }
        prev_x = x;
        if (rc == 0 && x >= 0) {
            frame_of(c, i, out, k);
        } else {
            for (int col = 0; col < 5; col++) out[col][k] = -1;
            out[5][k] = 0;
        }
    }
    free(seen);
    return rc;
}

/* Whether each of the count buffers holds n elements of size bytes. */
static int check_lengths(Py_buffer *b, int count, Py_ssize_t n, Py_ssize_t size) {
    for (int j = 0; j < count; j++)
        if (b[j].len != n * size) return 0;
    return 1;
}

static PyObject *parents(PyObject *self, PyObject *args) {
    /* order (int32, n); pid, tid, start, end (int64, n); parent (int32, n, written) */
    Py_buffer b[6];
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5])) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = b[0].len / 4;
    if (b[0].len % 4 != 0 || n > INT32_MAX || !check_lengths(b + 1, 4, n, 8) || !check_lengths(b + 5, 1, n, 4)) {
        PyErr_SetString(PyExc_ValueError, "parents: buffers of different lengths");
        goto done;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = run_parents(n, (const int32_t *)b[0].buf, (const int64_t *)b[1].buf, (const int64_t *)b[2].buf,
                     (const int64_t *)b[3].buf, (const int64_t *)b[4].buf, (int32_t *)b[5].buf);
    Py_END_ALLOW_THREADS
    if (rc == -1) PyErr_SetString(PyExc_ValueError, "parents: order is not a permutation");
    else if (rc == -2) PyErr_NoMemory();
    else result = Py_NewRef(Py_None);
done:
    for (int j = 0; j < 6; j++) PyBuffer_Release(&b[j]);
    return result;
}

static PyObject *walk(PyObject *self, PyObject *args) {
    /* by, at, ts (int64, m each); order, parent (int32, n each); end, flags, op, top, mod, bwd,
     * comm, bits (int64, n each); the six outputs (int64, m each) */
    enum { N_B = 19 };
    Py_buffer b[N_B];
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*y*y*y*y*y*w*w*w*w*w*w*", &b[0], &b[1], &b[2], &b[3],
                          &b[4], &b[5], &b[6], &b[7], &b[8], &b[9], &b[10], &b[11], &b[12], &b[13],
                          &b[14], &b[15], &b[16], &b[17], &b[18]))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t m = b[0].len / 8, n = b[3].len / 4;
    if (b[0].len % 8 != 0 || b[3].len % 4 != 0 || !check_lengths(b, 3, m, 8) || !check_lengths(b + 3, 2, n, 4) ||
        !check_lengths(b + 5, 8, n, 8) || !check_lengths(b + 13, 6, m, 8)) {
        PyErr_SetString(PyExc_ValueError, "walk: buffers of different lengths");
        goto done;
    }
    const int64_t *in[13];
    for (int j = 0; j < 13; j++) in[j] = (const int64_t *)b[j].buf;
    int64_t *dst[N_OUT];
    for (int j = 0; j < N_OUT; j++) dst[j] = (int64_t *)b[13 + j].buf;
    Ctx c = {in[6], in[7], in[8], in[9], in[10], in[11], in[12]};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = run_walk(m, n, in[0], in[1], in[2], (const int32_t *)b[3].buf, in[5], (const int32_t *)b[4].buf, &c, dst);
    Py_END_ALLOW_THREADS
    if (rc == -1) PyErr_SetString(PyExc_ValueError, "walk: a visiting order, position or link out of range");
    else if (rc == -2) PyErr_NoMemory();
    else result = Py_NewRef(Py_None);
done:
    for (int j = 0; j < N_B; j++) PyBuffer_Release(&b[j]);
    return result;
}

static PyMethodDef methods[] = {
    {"sweep", sweep, METH_VARARGS, "The stack sweep of nesting.sweep_loop over int64 buffers."},
    {"parents", parents, METH_VARARGS, "Per sorted range, the sorted position of its stack parent."},
    {"walk", walk, METH_VARARGS, "Per point, the context the sweep gives it (from the ranges' own)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_nesting", NULL, -1, methods};

PyMODINIT_FUNC PyInit__nesting(void) { return PyModule_Create(&module); }
