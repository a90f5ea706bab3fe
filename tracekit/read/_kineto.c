/*
 * tracekit/_kineto.c -- one pass over the text of Kineto's "traceEvents", straight to columns.
 *
 * Design
 * ------
 * scan(text, start, end, text_times, classify) reads the events in text[start:end]: a run of
 * whole events "{...}, {...}" cut out of the traceEvents array, as tracekit/streaming.py slices
 * it (with end=None: the events up to the array's closing "]", whose offset is returned). Which
 * events are kept, and as what kind, is tracekit/schema.py's event_class, called back (the
 * `classify` argument) once per distinct (ph, cat, name) triple: no rule is written twice. It
 * returns a dict ("n": events scanned, "kept": events kept) of columns with one entry per kept
 * event, in file order, as writable buffers (Column: an exact-size malloc'd array that numpy
 * views without another copy), so no selection by masks follows in Python:
 *
 *   kind        int8    the event's class (>= 0).
 *   triple      int32   code of the event's (ph, cat, name) in "triples" (int32 x 3 string
 *                       codes each, -1 for absent or null); per triple, "classes" (int8) and
 *                       "counts" (int64: its events, kept or not, for unknown categories).
 *   pid tid flow_id corr seq fwd_tid stream addr
 *               int64   ints modulo 2**64 (as tracekit.columns wraps them), -1 when absent or
 *                       null; seq holds args["wait_on_cuda_event_record_corr_id"] and fwd_tid
 *                       args["wait_on_stream"] where those come instead (cuda_sync events),
 *                       an event with both of a pair being refused; a string value stores
 *                       its string code and sets bit k of "idstr" (k = the column's
 *                       position in that list): Python converts it.
 *   ts dur      int64   nanoseconds, with bits in "tflags" (valid, was a float, is beyond
 *                       2**43 us): exactly tracekit/timetext.py's number_times per value, or
 *                       with text_times its text_times (the Python side decides per slice,
 *                       as tracekit.columns does, which of the two applies).
 *   bytes       float64 args.bytes when a number, else NaN; for an event of class MEMORY
 *                       (a "[memory]" allocation or free), args.Bytes instead; for one of
 *                       class MEMCPY whose args.bytes is not a number, args.size (an MTIA
 *                       DMA request's bytes) when a number.
 *   device_type device_id
 *               int64   args["Device Type"], ["Device Id"] when an int, else -1.
 *   total_allocated total_reserved
 *               float64 args["Total Allocated"], ["Total Reserved"] when a number, else NaN.
 *   collective  int32   string code of args["Collective name"], -1 when absent or null.
 *   input_dims input_types input_strides concrete_inputs
 *               int32   string code of the JSON text of args["Input Dims"], ["Input type"],
 *                       ["Input Strides"], ["Concrete Inputs"] exactly as it stands in the
 *                       run (raw bytes from the value's first byte to its last), -1 when
 *                       absent or null (tracekit.schema.SHAPE_FIELDS).
 *   in_nelems out_nelems comm_dtype group_size pg_name pg_desc comm_seq p2p_src p2p_dst
 *               int32   the same, of args["In msg nelems"], ["Out msg nelems"], ["dtype"],
 *                       ["Group size"], ["Process Group Name"], ["Process Group
 *                       Description"], ["Seq"], ["Src Rank"], ["Dst Rank"] (tracekit.schema.COMM_FIELDS).
 *   meta        list    (triple, pid, tid, args.name) for each event of class METADATA with a
 *                       string args.name (naming a process or thread), pid and tid as msgspec
 *                       decodes them (int, str or None).
 *   strings     list    the distinct strings, one Python str each, indexed by the codes.
 *
 * Strings are interned by their raw bytes in an open-addressing hash table (a seeded hash,
 * and a probe budget: a table that probes too much gives up, so hostile collisions cannot
 * make the scan quadratic); only distinct values become Python objects.
 *
 * Exactness by refusal: the scanner validates the whole run strictly as JSON (grammar, UTF-8,
 * escapes and surrogate pairs, control characters, nesting up to MAX_DEPTH) and the types
 * tracekit.schema's msgspec structs accept. Anything it does not handle exactly as the msgspec
 * path does -- malformed or truncated JSON, a value of the wrong type, a duplicate or escaped
 * key, NaN/Infinity, numbers out of range or longer than it converts, exponents in text times,
 * deep nesting -- makes scan() return None, and the caller decodes that run with msgspec,
 * which gives today's columns, errors and warnings. So scan() succeeds only where msgspec
 * would, with the same values.
 *
 * Safety: every read is checked against the end of the run (the eight-byte loads too: taken
 * only where eight bytes remain); nesting is bounded by MAX_DEPTH (skipped values keep their
 * open containers in a fixed stack, no recursion); memory grows with the number of events in
 * the run (each event is at least two bytes of text; the columns start at one event per 192
 * bytes); the buffer is held through the buffer protocol for the whole scan.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__) && defined(__GNUC__)
#include <emmintrin.h>
#endif

#define OK 0
#define FAIL (-1)  /* not handled here: the caller decodes the run with msgspec */
#define NOMEM (-2) /* out of memory: MemoryError */
#define PYERR (-3) /* the classifier raised: its exception propagates */
#define TRY(x)              \
    do {                    \
        int r_ = (x);       \
        if (r_ != OK)       \
            return r_;      \
    } while (0)

/* The scanner's small steps, inlined into the event loop (a function pointer is resolved then).
 * The fuzz build (fuzz/run.py) defines TRACEKIT_NO_FORCE_INLINE: instrumented for ASan, UBSan
 * and coverage, the one inlined loop took clang over ten minutes to compile. */
#if defined(__GNUC__) && !defined(TRACEKIT_NO_FORCE_INLINE)
#define HOT static inline __attribute__((always_inline))
#else
#define HOT static inline
#endif

#define MAX_DEPTH 64
#define MAX_US 4000000000000000LL       /* tracekit.timetext.MAX_US */
#define EXACT_FLOAT_US 8796093022208.0  /* 2**43: tracekit.timetext.EXACT_FLOAT_US */
#define TEXT_WIDE 32                    /* tracekit.timetext._WIDE */
#define MAX_INT_DIGITS 64               /* longer ints in typed fields: msgspec's business */

/* Bits of tflags. */
#define TS_OK 1
#define DUR_OK 2
#define TS_FLOAT 4
#define TS_BIG 8
#define DUR_FLOAT 16
#define DUR_BIG 32

/* tracekit.schema.METADATA: the class of the events naming processes and threads. */
#define CLASS_METADATA (-1)
/* tracekit.schema.MEMORY: the class of "[memory]" events, whose bytes column is args.Bytes. */
#define CLASS_MEMORY 9
/* tracekit.schema.MEMCPY: a copy's bytes are args.size where args.bytes is not a number (MTIA's
 * DMA requests). */
#define CLASS_MEMCPY 1

/* The id columns, in the order of the idstr bits. */
enum { I_PID, I_TID, I_ID, I_CORR, I_SEQ, I_FWD, I_STREAM, I_ADDR, N_IDS }; /* at most 8: idstr's bits */
static const char *const ID_NAMES[N_IDS] = {"pid", "tid", "flow_id", "corr", "seq", "fwd_tid", "stream", "addr"};

/* The args kept as their raw JSON text (tracekit.schema.SHAPE_FIELDS), in that order. */
enum {
    S_DIMS, S_TYPES, S_STRIDES, S_CONCRETE,
    S_IN_NELEMS, S_OUT_NELEMS, S_DTYPE, S_GROUP_SIZE, S_PG_NAME, S_PG_DESC, S_SEQ, S_SRC, S_DST, /* COMM_FIELDS */
    N_SHAPES
};
static const char *const SHAPE_NAMES[N_SHAPES] = {
    "input_dims", "input_types", "input_strides", "concrete_inputs",
    "in_nelems", "out_nelems", "comm_dtype", "group_size", "pg_name", "pg_desc", "comm_seq",
    "p2p_src", "p2p_dst"};

/* ------------------------------------------------------------------ growable arrays */

static int
grow(void **arr, size_t elem, size_t need, size_t *cap)
{
    if (need <= *cap)
        return OK;
    size_t n = *cap ? *cap : 256;
    while (n < need)
        n *= 2;
    if (n > PY_SSIZE_T_MAX / elem)
        return NOMEM;
    void *p = realloc(*arr, n * elem);
    if (!p)
        return NOMEM;
    *arr = p;
    *cap = n;
    return OK;
}

/* ------------------------------------------------------------------ string interning */

typedef struct {
    const uint8_t *s; /* raw bytes between the quotes (escapes not decoded) */
    Py_ssize_t len;
    uint64_t hash;
    int esc;
} StrEnt;

typedef struct {
    StrEnt *ents;
    size_t n, cap;
    int32_t *slots; /* index into ents, -1: empty */
    size_t nslots;
} Interner;

typedef struct {
    int32_t *keys; /* ph, cat, name codes */
    size_t n, cap;
    int32_t *slots;
    size_t nslots;
    int8_t *cls;     /* each triple's class, by the classifier */
    int64_t *count;  /* each triple's events (kept or not) */
    size_t ccap, kcap;
} Triples;

/* Whether a[0:n] == b[0:n]; short strings, so no call: words, the last one overlapping. */
HOT int
same_bytes(const uint8_t *a, const uint8_t *b, Py_ssize_t n)
{
    uint64_t x, y;
    if (n >= 8) {
        for (Py_ssize_t i = 0; i + 8 < n; i += 8) {
            memcpy(&x, a + i, 8);
            memcpy(&y, b + i, 8);
            if (x != y)
                return 0;
        }
        memcpy(&x, a + n - 8, 8);
        memcpy(&y, b + n - 8, 8);
        return x == y;
    }
    if (n >= 4) {
        uint32_t u, v, u2, v2;
        memcpy(&u, a, 4);
        memcpy(&v, b, 4);
        memcpy(&u2, a + n - 4, 4);
        memcpy(&v2, b + n - 4, 4);
        return u == v && u2 == v2;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

static uint64_t
mix64(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

HOT uint64_t
hash_bytes(const uint8_t *p, Py_ssize_t n, uint64_t seed)
{
    uint64_t h = seed ^ ((uint64_t)n * 0x9e3779b97f4a7c15ULL);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x9fb21c651e98df25ULL;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    if (n > 0) { /* the last 1..7 bytes: two overlapping loads, no byte loop */
        uint64_t w = 0;
        if (n >= 4) {
            uint32_t a, b;
            memcpy(&a, p, 4);
            memcpy(&b, p + n - 4, 4);
            w = ((uint64_t)a << 32) | b;
        }
        else {
            w = ((uint64_t)p[0] << 16) | ((uint64_t)p[n >> 1] << 8) | p[n - 1];
        }
        h = (h ^ w) * 0x9fb21c651e98df25ULL;
    }
    return mix64(h);
}

/* Allocate a slot table of at least twice `want` entries, all empty. */
static int
new_slots(int32_t **slots, size_t *nslots, size_t want)
{
    size_t n = 1024;
    while (n < 2 * want)
        n *= 2;
    int32_t *s = malloc(n * sizeof(int32_t));
    if (!s)
        return NOMEM;
    memset(s, 0xff, n * sizeof(int32_t));
    free(*slots);
    *slots = s;
    *nslots = n;
    return OK;
}

/* ------------------------------------------------------------------ the scan's state */

typedef enum { TOK_NONE, TOK_INT, TOK_STR } TokType;

typedef struct {
    TokType type;
    const uint8_t *s; /* TOK_INT: the digits' text */
    Py_ssize_t len;
    int32_t code; /* TOK_STR */
} Tok;

typedef struct {
    int32_t triple;
    Tok pid, tid;
    int32_t argname;
} MetaEnt;

typedef struct {
    size_t n, cap;
    int8_t *kind;
    int32_t *triple;
    int64_t *ids[N_IDS];
    uint8_t *idstr;
    int64_t *ts, *dur;
    uint8_t *tflags;
    double *nbytes;
    int32_t *coll;
    int32_t *shape[N_SHAPES];
    int64_t *devtype, *devid;
    double *talloc, *tres;
} Cols;

typedef struct {
    const uint8_t *s;
    Py_ssize_t len;
    int32_t code; /* -1: none yet */
} LastStr;

typedef struct {
    const uint8_t *p, *end;
    int text_times;
    LastStr last[3]; /* the previous ph, cat and name */
    LastStr names[256]; /* names lately (parse_repeated), code -1: none */
    uint64_t seed;
    size_t probes, lookups; /* the hash tables' work, against a budget */
    Interner strs;
    Triples triples;
    Cols cols;
    MetaEnt *meta;
    size_t nmeta, metacap;
    size_t nall;         /* events scanned, kept or not (cols.n: those kept) */
    PyObject *classify;  /* (ph, cat, name) -> class: kept when >= 0 */
    PyObject **pystr;    /* the Python str of each string code, made when first needed */
    size_t pystrcap;
    struct VEnt_ *vcache; /* containers skipped lately (skip_container), NULL: none */
} Ctx;

/* Hash tables may probe this many times per lookup on average (plus a constant) before the
 * scan gives up: a well-spread table needs ~1.5. */
#define PROBE_BUDGET(c) (16 * (c)->lookups + 65536)

static int
rehash_strings(Interner *t)
{
    TRY(new_slots(&t->slots, &t->nslots, t->n + 1));
    size_t mask = t->nslots - 1;
    for (size_t i = 0; i < t->n; i++) {
        size_t j = t->ents[i].hash & mask;
        while (t->slots[j] >= 0)
            j = (j + 1) & mask;
        t->slots[j] = (int32_t)i;
    }
    return OK;
}

/* The code of the string with raw bytes s[0:len], added when new. */
HOT int
intern(Ctx *c, const uint8_t *s, Py_ssize_t len, int esc, int32_t *code)
{
    Interner *t = &c->strs;
    if (2 * (t->n + 1) > t->nslots)
        TRY(rehash_strings(t));
    uint64_t h = hash_bytes(s, len, c->seed);
    size_t mask = t->nslots - 1, j = h & mask;
    c->lookups++;
    for (;;) {
        int32_t k = t->slots[j];
        if (k < 0)
            break;
        StrEnt *e = &t->ents[k];
        if (e->hash == h && e->len == len && same_bytes(e->s, s, len)) {
            *code = k;
            return OK;
        }
        j = (j + 1) & mask;
        if (++c->probes > PROBE_BUDGET(c))
            return FAIL;
    }
    if (t->n >= INT32_MAX)
        return FAIL;
    TRY(grow((void **)&t->ents, sizeof(StrEnt), t->n + 1, &t->cap));
    t->ents[t->n] = (StrEnt){s, len, h, esc};
    t->slots[j] = (int32_t)t->n;
    *code = (int32_t)t->n++;
    return OK;
}

static uint64_t
hash_triple(const int32_t *k, uint64_t seed)
{
    uint64_t a = ((uint64_t)(uint32_t)k[2] << 32) | (uint32_t)k[1];
    return mix64(seed ^ a ^ ((uint64_t)(uint32_t)k[0] * 0x9e3779b97f4a7c15ULL));
}

static int
rehash_triples(Ctx *c)
{
    Triples *t = &c->triples;
    TRY(new_slots(&t->slots, &t->nslots, t->n + 1));
    size_t mask = t->nslots - 1;
    for (size_t i = 0; i < t->n; i++) {
        size_t j = hash_triple(t->keys + 3 * i, c->seed) & mask;
        while (t->slots[j] >= 0)
            j = (j + 1) & mask;
        t->slots[j] = (int32_t)i;
    }
    return OK;
}

static PyObject *make_str(const StrEnt *e);

/* The Python str of string code k (None for -1), made once per scan: a new reference. */
static PyObject *
str_object(Ctx *c, int32_t k)
{
    if (k < 0)
        Py_RETURN_NONE;
    size_t old = c->pystrcap;
    if ((size_t)k >= old) {
        if (grow((void **)&c->pystr, sizeof(PyObject *), (size_t)k + 1, &c->pystrcap) != OK)
            return PyErr_NoMemory();
        memset(c->pystr + old, 0, (c->pystrcap - old) * sizeof(PyObject *));
    }
    if (!c->pystr[k] && !(c->pystr[k] = make_str(&c->strs.ents[k])))
        return NULL;
    return Py_NewRef(c->pystr[k]);
}

/* The class of a new triple: c->classify(ph, cat, name), an int8 (kept when >= 0). */
static int
classify(Ctx *c, const int32_t *key, int8_t *out)
{
    PyObject *ph = str_object(c, key[0]);
    PyObject *cat = ph ? str_object(c, key[1]) : NULL;
    PyObject *name = cat ? str_object(c, key[2]) : NULL;
    PyObject *r = name ? PyObject_CallFunctionObjArgs(c->classify, ph, cat, name, NULL) : NULL;
    Py_XDECREF(ph);
    Py_XDECREF(cat);
    Py_XDECREF(name);
    if (!r)
        return PYERR;
    long v = PyLong_AsLong(r);
    Py_DECREF(r);
    if (v == -1 && PyErr_Occurred())
        return PYERR;
    if (v < INT8_MIN || v > INT8_MAX) {
        PyErr_SetString(PyExc_ValueError, "scan: the classifier gave a class outside int8");
        return PYERR;
    }
    *out = (int8_t)v;
    return OK;
}

/* The code of the (ph, cat, name) triple in *code (-1 when new: *slot is its empty slot). */
HOT int
triple_find(Ctx *c, const int32_t *key, int32_t *code, size_t *slot)
{
    Triples *t = &c->triples;
    if (2 * (t->n + 1) > t->nslots)
        TRY(rehash_triples(c));
    size_t mask = t->nslots - 1, j = hash_triple(key, c->seed) & mask;
    c->lookups++;
    for (;;) {
        int32_t k = t->slots[j];
        if (k < 0)
            break;
        const int32_t *kk = t->keys + 3 * (size_t)k;
        if (kk[0] == key[0] && kk[1] == key[1] && kk[2] == key[2]) {
            *code = k;
            return OK;
        }
        j = (j + 1) & mask;
        if (++c->probes > PROBE_BUDGET(c))
            return FAIL;
    }
    *code = -1;
    *slot = j;
    return OK;
}

/* The code of the (ph, cat, name) triple, added (and classified) when new. */
static int
triple_code(Ctx *c, int32_t ph, int32_t cat, int32_t name, int32_t *code)
{
    Triples *t = &c->triples;
    int32_t key[3] = {ph, cat, name};
    size_t j;
    TRY(triple_find(c, key, code, &j));
    if (*code >= 0)
        return OK;
    if (t->n >= INT32_MAX)
        return FAIL;
    TRY(grow((void **)&t->keys, 3 * sizeof(int32_t), t->n + 1, &t->cap));
    TRY(grow((void **)&t->cls, sizeof(int8_t), t->n + 1, &t->ccap));
    TRY(grow((void **)&t->count, sizeof(int64_t), t->n + 1, &t->kcap));
    TRY(classify(c, key, &t->cls[t->n]));
    t->count[t->n] = 0;
    memcpy(t->keys + 3 * t->n, key, sizeof key);
    t->slots[j] = (int32_t)t->n;
    *code = (int32_t)t->n++;
    return OK;
}

/* ------------------------------------------------------------------ JSON tokens */

/* Bytes that may stand in a string as they are: printable ASCII but '"' and '\\'. */
static uint8_t PLAIN[256];
/* JSON's whitespace. */
static uint8_t WSP[256];

static void
init_tables(void)
{
    for (int i = 0x20; i < 0x80; i++)
        PLAIN[i] = 1;
    PLAIN['"'] = PLAIN['\\'] = 0;
    WSP[' '] = WSP['\n'] = WSP['\r'] = WSP['\t'] = 1;
}

#define IS_DIGIT(ch) ((uint8_t)((ch) - '0') < 10)

/* The first byte from p that is not whitespace (or end). Most JSON has none or one space. */
HOT const uint8_t *
ws(const uint8_t *p, const uint8_t *end)
{
    if (p < end) {
        if (*p > ' ')
            return p;
        if (*p == ' ' && end - p >= 2 && p[1] > ' ')
            return p + 1;
    }
    while (p < end && WSP[*p])
        p++;
    return p;
}

HOT void
skip_ws(Ctx *c)
{
    c->p = ws(c->p, c->end);
}

/* The first byte of what follows the separator `sep` (':' or ','), whitespace around it
 * skipped; NULL when the next byte that is not whitespace is not `sep`. The usual shapes
 * ("sep", "sep ") are tested first. */
HOT const uint8_t *
after_sep(const uint8_t *p, const uint8_t *end, uint8_t sep)
{
    if (end - p >= 3) {
        unsigned two = p[0] | (unsigned)p[1] << 8;
        if (two == (sep | (unsigned)' ' << 8)) {
            if (p[2] > ' ')
                return p + 2;
        }
        else if (p[0] == sep && p[1] > ' ') {
            return p + 1;
        }
    }
    p = ws(p, end);
    if (p >= end || *p != sep)
        return NULL;
    return ws(p + 1, end);
}

/* Expect byte ch (after whitespace) and step over it. */
HOT int
expect(Ctx *c, uint8_t ch)
{
    skip_ws(c);
    if (c->p >= c->end || *c->p != ch)
        return FAIL;
    c->p++;
    return OK;
}

static int
hex4(const uint8_t *p, const uint8_t *end, unsigned *out)
{
    if (end - p < 4)
        return FAIL;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t ch = p[i];
        unsigned d;
        if (IS_DIGIT(ch))
            d = ch - '0';
        else if ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f')
            d = (ch | 0x20) - 'a' + 10;
        else
            return FAIL;
        v = v * 16 + d;
    }
    *out = v;
    return OK;
}

/* The escape at *pp (a backslash): checked, and stepped over. Lone surrogates are refused. */
static int
check_escape(const uint8_t **pp, const uint8_t *end)
{
    const uint8_t *p = *pp;
    if (end - p < 2)
        return FAIL;
    switch (p[1]) {
    case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
        *pp = p + 2;
        return OK;
    case 'u': {
        unsigned u, lo;
        TRY(hex4(p + 2, end, &u));
        if (u >= 0xdc00 && u <= 0xdfff)
            return FAIL;
        if (u >= 0xd800 && u <= 0xdbff) {
            if (end - p < 12 || p[6] != '\\' || p[7] != 'u')
                return FAIL;
            TRY(hex4(p + 8, end, &lo));
            if (lo < 0xdc00 || lo > 0xdfff)
                return FAIL;
            *pp = p + 12;
            return OK;
        }
        *pp = p + 6;
        return OK;
    }
    default:
        return FAIL;
    }
}

/* Length of the valid UTF-8 sequence at p (a byte >= 0x80), 0 if invalid (as Python's
 * decoder judges: no overlong forms, no surrogates, nothing above U+10FFFF). */
static int
utf8_len(const uint8_t *p, const uint8_t *end)
{
    uint8_t b0 = p[0];
    Py_ssize_t left = end - p;
#define CONT(x) (((x) & 0xc0) == 0x80)
    if (b0 >= 0xc2 && b0 <= 0xdf)
        return left >= 2 && CONT(p[1]) ? 2 : 0;
    if (b0 >= 0xe0 && b0 <= 0xef) {
        if (left < 3 || !CONT(p[1]) || !CONT(p[2]))
            return 0;
        if (b0 == 0xe0 && p[1] < 0xa0)
            return 0;
        if (b0 == 0xed && p[1] > 0x9f)
            return 0;
        return 3;
    }
    if (b0 >= 0xf0 && b0 <= 0xf4) {
        if (left < 4 || !CONT(p[1]) || !CONT(p[2]) || !CONT(p[3]))
            return 0;
        if (b0 == 0xf0 && p[1] < 0x90)
            return 0;
        if (b0 == 0xf4 && p[1] > 0x8f)
            return 0;
        return 4;
    }
    return 0;
#undef CONT
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* The first byte from p that is not PLAIN (or end). Eight bytes at a time: a byte of w is
 * flagged when it is '"', '\\', below 0x20 or at least 0x80 (the zero-byte tests flag exactly
 * from the lowest such byte up, so the lowest flag is exact). */
HOT const uint8_t *
skip_plain(const uint8_t *p, const uint8_t *end)
{
#if defined(__SSE2__) && defined(__GNUC__)
    /* Sixteen bytes at a time: '"', '\\', and (signed) below 0x20, which takes the bytes from
     * 0x80 up too. */
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                                   _mm_cmplt_epi8(v, space));
        unsigned mask = (unsigned)_mm_movemask_epi8(hit);
        if (mask)
            return p + __builtin_ctz(mask);
        p += 16;
    }
#endif
    while (end - p >= 8) {
        uint64_t w, q, b;
        memcpy(&w, p, 8);
        q = w ^ (ONES * '"');
        b = w ^ (ONES * '\\');
        uint64_t flag = ((q - ONES) & ~q) | ((b - ONES) & ~b) | ((w - ONES * 0x20) & ~w) | w;
        flag &= HIGHS;
        if (flag) {
#if PY_LITTLE_ENDIAN && defined(__GNUC__)
            return p + (__builtin_ctzll(flag) >> 3);
#else
            break;
#endif
        }
        p += 8;
    }
    while (p < end && PLAIN[*p])
        p++;
    return p;
}

typedef struct {
    const uint8_t *s; /* the raw bytes between the quotes */
    Py_ssize_t len;
    int esc;
} Str;

/* The string whose opening quote is at p, checked; returns the byte after its closing quote,
 * NULL if invalid or unterminated. *esc is set when it holds an escape. */
HOT const uint8_t *
scan_string(const uint8_t *p, const uint8_t *end, int *esc)
{
    p++;
    for (;;) {
        p = skip_plain(p, end);
        if (p >= end)
            return NULL;
        uint8_t ch = *p;
        if (ch == '"')
            return p + 1;
        if (ch == '\\') {
            if (check_escape(&p, end) != OK)
                return NULL;
            *esc = 1;
        }
        else if (ch < 0x20) {
            return NULL;
        }
        else {
            int k = utf8_len(p, end);
            if (!k)
                return NULL;
            p += k;
        }
    }
}

/* The string at c->p (its opening quote), checked, and stepped over. */
HOT int
parse_string(Ctx *c, Str *out)
{
    int esc = 0;
    const uint8_t *q = scan_string(c->p, c->end, &esc);
    if (!q)
        return FAIL;
    out->s = c->p + 1;
    out->len = q - 1 - out->s;
    out->esc = esc;
    c->p = q;
    return OK;
}

typedef struct {
    const uint8_t *s; /* the number's text */
    Py_ssize_t len;
    int neg, is_int, has_exp;
    int nint, nfrac;  /* digits before and after the '.' */
    uint64_t mag;     /* the digits before the '.', modulo 2**64 */
    uint64_t frac;    /* the digits after the '.', modulo 2**64 */
    uint64_t wrapped; /* ints: the value modulo 2**64 */
} Num;

static const uint64_t POW10U[20] = {1ULL,
                                    10ULL,
                                    100ULL,
                                    1000ULL,
                                    10000ULL,
                                    100000ULL,
                                    1000000ULL,
                                    10000000ULL,
                                    100000000ULL,
                                    1000000000ULL,
                                    10000000000ULL,
                                    100000000000ULL,
                                    1000000000000ULL,
                                    10000000000000ULL,
                                    100000000000000ULL,
                                    1000000000000000ULL,
                                    10000000000000000ULL,
                                    100000000000000000ULL,
                                    1000000000000000000ULL,
                                    10000000000000000000ULL};

#if PY_LITTLE_ENDIAN && defined(__GNUC__)
#define SWAR_DIGITS 1
/* A nonzero byte for each byte of w (eight bytes of text) that is not an ASCII digit. Adding 6
 * may carry out of a byte at or above 0xfa, into later bytes only: the lowest flagged byte,
 * the first non-digit, is exact. */
HOT uint64_t
nondigits(uint64_t w)
{
    const uint64_t hi = 0xf0f0f0f0f0f0f0f0ULL, threes = 0x3030303030303030ULL;
    return ((w & hi) ^ threes) | (((w + 0x0606060606060606ULL) & hi) ^ threes);
}

/* The value of eight ASCII digits, the first in the lowest byte (leading zero bytes allowed). */
HOT uint64_t
eight_digits(uint64_t w)
{
    w = ((w & 0x0f0f0f0f0f0f0f0fULL) * 2561) >> 8;
    w = ((w & 0x00ff00ff00ff00ffULL) * 6553601) >> 16;
    return ((w & 0x0000ffff0000ffffULL) * 42949672960001ULL) >> 32;
}
#else
#define SWAR_DIGITS 0
#endif

/* The run of digits at p (none possible), its value folded into *v modulo 2**64; returns its
 * end. Eight bytes at a time while eight remain. */
HOT const uint8_t *
digit_run(const uint8_t *p, const uint8_t *end, uint64_t *v)
{
    uint64_t x = *v;
#if SWAR_DIGITS
    while (end - p >= 8) {
        uint64_t w, nd;
        memcpy(&w, p, 8);
        nd = nondigits(w);
        if (!nd) {
            x = x * 100000000ULL + eight_digits(w);
            p += 8;
            continue;
        }
        int k = __builtin_ctzll(nd) >> 3;
        if (k) {
            x = x * POW10U[k] + eight_digits(w << (8 * (8 - k)));
            p += k;
        }
        *v = x;
        return p;
    }
#endif
    for (; p < end && IS_DIGIT(*p); p++)
        x = x * 10 + (uint64_t)(*p - '0');
    *v = x;
    return p;
}

/* The end of the run of digits at p (none possible). */
HOT const uint8_t *
skip_digits(const uint8_t *p, const uint8_t *end)
{
#if defined(__SSE2__) && defined(__GNUC__)
    /* Sixteen bytes at a time: a byte is a digit when its distance from '0' is at most 9. */
    const __m128i zero = _mm_set1_epi8('0'), nine = _mm_set1_epi8(9);
    while (end - p >= 16) {
        __m128i d = _mm_sub_epi8(_mm_loadu_si128((const __m128i *)p), zero);
        unsigned mask = ~(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(d, nine), d)) & 0xffff;
        if (mask)
            return p + __builtin_ctz(mask);
        p += 16;
    }
#endif
#if SWAR_DIGITS
    while (end - p >= 8) {
        uint64_t w, nd;
        memcpy(&w, p, 8);
        nd = nondigits(w);
        if (nd)
            return p + (__builtin_ctzll(nd) >> 3);
        p += 8;
    }
#endif
    while (p < end && IS_DIGIT(*p))
        p++;
    return p;
}

/* The number at p, checked against JSON's grammar, into n (its digits' values only with
 * `values`: mag, frac and wrapped are 0 without); returns its end, NULL if invalid. */
HOT const uint8_t *
scan_number(const uint8_t *p, const uint8_t *end, Num *n, int values)
{
    const uint8_t *d0;
    uint64_t v = 0, f = 0;
    n->s = p;
    n->neg = *p == '-';
    n->is_int = 1;
    n->has_exp = 0;
    p += n->neg;
    if (p >= end || !IS_DIGIT(*p))
        return NULL;
    d0 = p;
    if (*p == '0')
        p++;
    else
        p = values ? digit_run(p, end, &v) : skip_digits(p, end);
    n->nint = (int)(p - d0 > 1000000 ? 1000000 : p - d0);
    n->nfrac = 0;
    if (p < end && *p == '.') {
        n->is_int = 0;
        d0 = ++p;
        p = values ? digit_run(p, end, &f) : skip_digits(p, end);
        if (p == d0)
            return NULL;
        n->nfrac = (int)(p - d0 > 1000000 ? 1000000 : p - d0);
    }
    if (p < end && (*p | 0x20) == 'e') {
        n->is_int = 0;
        n->has_exp = 1;
        if (++p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || !IS_DIGIT(*p))
            return NULL;
        p = skip_digits(p, end);
    }
    n->mag = v;
    n->frac = f;
    n->wrapped = n->neg ? 0 - v : v;
    n->len = p - n->s;
    return p;
}

/* The end of the number at p, checked against JSON's grammar as scan_number checks it (no
 * value: a skipped member's), NULL if invalid. */
HOT const uint8_t *
skip_number(const uint8_t *p, const uint8_t *end)
{
    p += *p == '-';
    if (p >= end || !IS_DIGIT(*p))
        return NULL;
    p = *p == '0' ? p + 1 : skip_digits(p, end);
    if (p < end && *p == '.') {
        const uint8_t *d0 = ++p;
        p = skip_digits(p, end);
        if (p == d0)
            return NULL;
    }
    if (p < end && (*p | 0x20) == 'e') {
        if (++p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || !IS_DIGIT(*p))
            return NULL;
        p = skip_digits(p, end);
    }
    return p;
}

/* The number at c->p, checked against JSON's grammar, and stepped over. */
HOT int
parse_number(Ctx *c, Num *n, int values)
{
    const uint8_t *p = scan_number(c->p, c->end, n, values);
    if (!p)
        return FAIL;
    c->p = p;
    return OK;
}

HOT int
parse_literal(Ctx *c, const char *word)
{
    size_t k = strlen(word);
    if ((size_t)(c->end - c->p) < k || memcmp(c->p, word, k) != 0)
        return FAIL;
    c->p += k;
    return OK;
}

/* The literal `word` (of k bytes) at p: returns its end, NULL if absent. */
HOT const uint8_t *
scan_literal(const uint8_t *p, const uint8_t *end, const char *word, size_t k)
{
    if ((size_t)(end - p) < k || memcmp(p, word, k) != 0)
        return NULL;
    return p + k;
}

/* A scalar value at p (not an object or array), checked: returns its end, NULL if invalid. */
HOT const uint8_t *
scan_scalar(const uint8_t *p, const uint8_t *end)
{
    int esc = 0;
    switch (*p) {
    case '"':
        return scan_string(p, end, &esc);
    case 't':
        return scan_literal(p, end, "true", 4);
    case 'f':
        return scan_literal(p, end, "false", 5);
    case 'n':
        return scan_literal(p, end, "null", 4);
    default:
        if (*p != '-' && !IS_DIGIT(*p))
            return NULL;
        return skip_number(p, end);
    }
}

/* Any JSON value at c->p, checked and stepped over, without recursion: `open` holds the
 * closing byte of each container entered. A value nested j containers deep within this one is
 * refused when depth + j > MAX_DEPTH. */
static int
skip_value(Ctx *c, int depth)
{
    const uint8_t *p = c->p, *end = c->end;
    uint8_t open[MAX_DEPTH + 2];
    int top = 0;
    for (;;) {
        /* a value at p, `top` containers deep */
        if (depth + top > MAX_DEPTH || p >= end)
            return FAIL;
        uint8_t ch = *p;
        if (ch == '{' || ch == '[') {
            uint8_t close = ch == '{' ? '}' : ']';
            p = ws(p + 1, end);
            if (p < end && *p == close) {
                p++;
            }
            else {
                open[top++] = close;
                if (close == ']')
                    continue; /* its first value */
                goto key;
            }
        }
        else if (!(p = scan_scalar(p, end))) {
            return FAIL;
        }
        /* after a value: close containers, or step over a ',' to the next member */
        for (;;) {
            if (top == 0) {
                c->p = p;
                return OK;
            }
            const uint8_t *q = after_sep(p, end, ',');
            if (q) {
                p = q;
                break;
            }
            p = ws(p, end);
            if (p >= end || *p != open[top - 1])
                return FAIL;
            p++;
            top--;
        }
        if (open[top - 1] == ']')
            continue;
    key: { /* a member of an object: its key and ':' */
        int esc = 0;
        if (p >= end || *p != '"' || !(p = scan_string(p, end, &esc)))
            return FAIL;
        if (!(p = after_sep(p, end, ':')))
            return FAIL;
    }
    }
}

/* Containers skipped lately, by their first sixteen bytes: Kineto repeats the same few
 * (args' "Input Dims", "Input type"...) in most events. A text that starts with one that was
 * checked is that same value (a JSON container ends where it closes, whatever follows), at the
 * same depth; comparing stops at the first difference, which is never past the end of the
 * value at hand (or the point where it is refused), so the cache adds linear work at most. */
#define VCACHE_SETS 256
#define VCACHE_WAYS 4
#define VCACHE_MAX 4096 /* longer containers are not kept */

struct VEnt_ {
    const uint8_t *s; /* its text, in the run (NULL: empty way) */
    uint32_t len;
    int16_t depth;
    int32_t code; /* its text's string code once interned (parse_raw), else -1 */
};
typedef struct VEnt_ VEnt;

/* The cache's entry for the container at p ('[' or '{', at least 16 bytes before end) at this
 * depth, moved to the front of its set; NULL when it is not there (*set: the set it goes in). */
HOT VEnt *
vcache_find(Ctx *c, const uint8_t *p, int depth, VEnt **set)
{
    const uint8_t *end = c->end;
    uint64_t a, b;
    memcpy(&a, p, 8);
    memcpy(&b, p + 8, 8);
    VEnt *w = c->vcache + ((a * 0x9e3779b97f4a7c15ULL ^ b * 0xc2b2ae3d27d4eb4fULL) >> 56) * VCACHE_WAYS;
    *set = w;
    for (int i = 0; i < VCACHE_WAYS && w[i].s; i++) {
        VEnt e = w[i];
        if (e.depth == depth && (size_t)(end - p) >= e.len && same_bytes(e.s, p, e.len)) {
            memmove(w + 1, w, (size_t)i * sizeof *w);
            w[0] = e;
            return w;
        }
    }
    return NULL;
}

/* The container just checked from p to c->p, kept first in its set (when not too long). */
HOT void
vcache_keep(Ctx *c, VEnt *set, const uint8_t *p, int depth, int32_t code)
{
    if (c->p - p <= VCACHE_MAX) {
        memmove(set + 1, set, (VCACHE_WAYS - 1) * sizeof *set);
        set[0] = (VEnt){p, (uint32_t)(c->p - p), (int16_t)depth, code};
    }
}

/* The container at c->p ('[' or '{'), as skip_value(c, depth) checks it: found in the cache,
 * else skipped and kept there (most recent first). */
static int
skip_container(Ctx *c, int depth)
{
    const uint8_t *p = c->p;
    VEnt *set, *e;
    if (c->end - p < 16 || !c->vcache)
        return skip_value(c, depth);
    if ((e = vcache_find(c, p, depth, &set))) {
        c->p = p + e->len;
        return OK;
    }
    TRY(skip_value(c, depth));
    vcache_keep(c, set, p, depth, -1);
    return OK;
}

/* The container at c->p, as skip_container checks it, its text interned (*code): a container
 * found in the cache keeps the code it was given the first time, so a repeated shape is
 * neither checked nor hashed again. */
static int
raw_container(Ctx *c, int depth, int32_t *code)
{
    const uint8_t *p = c->p;
    VEnt *set, *e;
    if (c->end - p < 16 || !c->vcache) {
        TRY(skip_value(c, depth));
        return intern(c, p, c->p - p, 0, code);
    }
    if ((e = vcache_find(c, p, depth, &set))) {
        c->p = p + e->len;
        if (e->code < 0)
            TRY(intern(c, p, e->len, 0, &e->code));
        *code = e->code;
        return OK;
    }
    TRY(skip_value(c, depth));
    TRY(intern(c, p, c->p - p, 0, code));
    vcache_keep(c, set, p, depth, *code);
    return OK;
}

/* ------------------------------------------------------------------ numbers to values */

static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* The correctly rounded double of a long or extreme number: Python's own parser. */
static int
slow_double(const Num *n, double *out)
{
    char buf[400];
    if (n->len >= (Py_ssize_t)sizeof buf)
        return FAIL;
    memcpy(buf, n->s, (size_t)n->len);
    buf[n->len] = 0;
    char *stop = NULL;
    double d = PyOS_string_to_double(buf, &stop, NULL);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return FAIL;
    }
    if (stop != buf + n->len)
        return FAIL;
    *out = d;
    return OK;
}

/* The number as msgspec decodes a float: correctly rounded (Clinger's exact fast path, else
 * Python's parser). Infinite (beyond float range) is refused: msgspec rejects it. */
HOT int
num_double(const Num *n, double *out)
{
    if (!n->has_exp && n->nint + n->nfrac <= 19) {
        /* At most 19 digits: the mantissa is exact in 64 bits, and the same as below. */
        uint64_t m = n->mag * POW10U[n->nfrac] + n->frac;
        if (m <= (1ULL << 53)) {
            double d = m == 0 ? 0.0 : (double)m / POW10[n->nfrac];
            *out = n->neg ? -d : d;
            return OK;
        }
    }
    const uint8_t *p = n->s + n->neg, *e = n->s + n->len;
    uint64_t m = 0;
    int nd = 0, slow = 0;
    int64_t nfrac = 0, exp10 = 0;
    for (; p < e && IS_DIGIT(*p); p++)
        if (nd || *p != '0') {
            m = m * 10 + (uint64_t)(*p - '0');
            slow |= ++nd > 19;
        }
    if (p < e && *p == '.')
        for (p++; p < e && IS_DIGIT(*p); p++) {
            nfrac++;
            if (nd || *p != '0') {
                m = m * 10 + (uint64_t)(*p - '0');
                slow |= ++nd > 19;
            }
        }
    if (p < e) { /* the exponent */
        int eneg = 0;
        p++;
        if (*p == '+' || *p == '-')
            eneg = *p++ == '-';
        for (; p < e; p++)
            if (exp10 < 100000)
                exp10 = exp10 * 10 + (*p - '0');
        if (eneg)
            exp10 = -exp10;
    }
    double d;
    int64_t e10 = exp10 - nfrac;
    if (!slow && m == 0)
        d = 0.0;
    else if (!slow && m <= (1ULL << 53) && e10 >= -22 && e10 <= 22)
        d = e10 < 0 ? (double)m / POW10[-e10] : (double)m * POW10[e10];
    else {
        TRY(slow_double(n, out));
        if (isinf(*out))
            return FAIL;
        return OK;
    }
    *out = n->neg ? -d : d;
    return OK;
}

/* Microseconds as tracekit.timetext.number_times converts one decoded value. */
HOT int
time_number(const Num *n, int64_t *ns, uint8_t *flags, uint8_t okbit, uint8_t floatbit, uint8_t bigbit)
{
    *ns = 0;
    if (n->is_int) {
        if (n->len - n->neg > 18) /* beyond int64: msgspec makes a big int, numpy balks */
            return FAIL;
        int64_t v = (int64_t)n->wrapped;
        if (v > -MAX_US && v < MAX_US) {
            *ns = v * 1000;
            *flags |= okbit;
            if (v >= (1LL << 43) || v <= -(1LL << 43))
                *flags |= bigbit;
        }
        return OK;
    }
    double f;
    TRY(num_double(n, &f));
    *flags |= floatbit;
    if (f > -(double)MAX_US && f < (double)MAX_US) {
        *flags |= okbit;
        if (fabs(f) >= EXACT_FLOAT_US)
            *flags |= bigbit;
        double whole = trunc(f); /* as numpy does it: whole and fraction apart */
        *ns = (int64_t)whole * 1000 + (int64_t)rint((f - whole) * 1000.0);
    }
    return OK;
}

/* Microseconds as tracekit.timetext.text_times converts one number's text (its _plain_ns:
 * exact, ties to even). Exponents and wide numbers (Decimal there) are left to it. */
static int
time_text(const Num *n, int64_t *ns, int *ok)
{
    const uint8_t *p = n->s + n->neg, *e = n->s + n->len;
    *ns = 0;
    *ok = 0;
    if (n->has_exp || n->len > TEXT_WIDE)
        return FAIL;
    int64_t whole = 0;
    int nint = 0;
    for (; p < e && *p != '.'; p++, nint++)
        if (nint < 17)
            whole = whole * 10 + (*p - '0');
    if (nint > 16 || whole >= MAX_US)
        return OK;
    int dig[4] = {0, 0, 0, 0}, beyond = 0;
    if (p < e)
        p++; /* the '.' */
    for (int k = 0; p < e; p++, k++) {
        if (k < 4)
            dig[k] = *p - '0';
        else
            beyond |= *p != '0';
    }
    int64_t frac = dig[0] * 100 + dig[1] * 10 + dig[2];
    int up = dig[3] > 5 || (dig[3] == 5 && (beyond || (frac & 1)));
    int64_t mag = whole * 1000 + frac + up;
    *ns = n->neg ? -mag : mag;
    *ok = 1;
    return OK;
}

/* ------------------------------------------------------------------ events */

typedef enum { T_MISSING, T_NULL, T_NUM } TimeTag;

typedef struct {
    int32_t ph, cat, name, coll, argname;
    int32_t triple; /* found early (-1: not yet) */
    int skip;       /* a known triple whose events are not kept: values are checked, not read */
    int64_t ids[N_IDS];
    int32_t shape[N_SHAPES]; /* raw texts' string codes, -1: absent or null */
    uint8_t idstr;
    Tok pid, tid;
    TimeTag ts_tag, dur_tag;
    Num ts, dur;
    double nbytes;
    double mbytes;         /* args.Bytes: the bytes of a MEMORY event */
    double size;           /* args.size: the bytes of a MEMCPY event with no args.bytes */
    int64_t devtype, devid;
    double talloc, tres;
} Ev;

enum { K_PH, K_CAT, K_NAME, K_PID, K_TID, K_TS, K_DUR, K_ID, K_ARGS, K_OTHER };
/* The args fields read; A_SHAPE + S_* are the raw-text ones. At most 32 (bits of `seen`). */
enum {
    A_CORR, A_SEQ, A_FWD, A_STREAM, A_COLL, A_BYTES, A_NAME, A_SIZE,
    A_MBYTES, A_DEVTYPE, A_DEVID, A_TALLOC, A_TRES, A_ADDR, /* "[memory]" events' */
    A_WCORR, A_WSTREAM, /* "cuda_sync" events': stored in seq and fwd_tid (tracekit.schema) */
    A_SHAPE, A_OTHER = A_SHAPE + N_SHAPES
};

#define KEY_IS(s, len, lit) \
    ((len) == (Py_ssize_t)(sizeof(lit) - 1) && same_bytes((s), (const uint8_t *)(lit), sizeof(lit) - 1))

HOT int
event_key(const Str *k)
{
    const uint8_t *s = k->s;
    Py_ssize_t n = k->len;
    switch (n) {
    case 2:
        return s[0] == 'p' && s[1] == 'h'   ? K_PH
               : s[0] == 't' && s[1] == 's' ? K_TS
               : s[0] == 'i' && s[1] == 'd' ? K_ID
                                            : K_OTHER;
    case 3:
        return KEY_IS(s, n, "cat")   ? K_CAT
               : KEY_IS(s, n, "pid") ? K_PID
               : KEY_IS(s, n, "tid") ? K_TID
               : KEY_IS(s, n, "dur") ? K_DUR
                                     : K_OTHER;
    case 4:
        return KEY_IS(s, n, "name") ? K_NAME : KEY_IS(s, n, "args") ? K_ARGS : K_OTHER;
    default:
        return K_OTHER;
    }
}

HOT int
args_key(const Str *k)
{
    const uint8_t *s = k->s;
    Py_ssize_t n = k->len;
    switch (n) {
    case 3:
        return KEY_IS(s, n, "Seq") ? A_SHAPE + S_SEQ : A_OTHER;
    case 4:
        return KEY_IS(s, n, "name")   ? A_NAME
               : KEY_IS(s, n, "Addr") ? A_ADDR
               : KEY_IS(s, n, "size") ? A_SIZE
                                      : A_OTHER;
    case 8:
        return KEY_IS(s, n, "Src Rank")   ? A_SHAPE + S_SRC
               : KEY_IS(s, n, "Dst Rank") ? A_SHAPE + S_DST
                                          : A_OTHER;
    case 9:
        return KEY_IS(s, n, "Device Id") ? A_DEVID : A_OTHER;
    case 10:
        return KEY_IS(s, n, "Input Dims")   ? A_SHAPE + S_DIMS
               : KEY_IS(s, n, "Input type") ? A_SHAPE + S_TYPES
               : KEY_IS(s, n, "Group size") ? A_SHAPE + S_GROUP_SIZE
                                            : A_OTHER;
    case 5:
        return KEY_IS(s, n, "bytes")   ? A_BYTES
               : KEY_IS(s, n, "Bytes") ? A_MBYTES
               : KEY_IS(s, n, "dtype") ? A_SHAPE + S_DTYPE
                                       : A_OTHER;
    case 6:
        return KEY_IS(s, n, "stream") ? A_STREAM : A_OTHER;
    case 11:
        return KEY_IS(s, n, "correlation") ? A_CORR : KEY_IS(s, n, "Device Type") ? A_DEVTYPE : A_OTHER;
    case 14:
        return KEY_IS(s, n, "Total Reserved")   ? A_TRES
               : KEY_IS(s, n, "Out msg nelems") ? A_SHAPE + S_OUT_NELEMS
               : KEY_IS(s, n, "wait_on_stream") ? A_WSTREAM
                                                : A_OTHER;
    case 33:
        return KEY_IS(s, n, "wait_on_cuda_event_record_corr_id") ? A_WCORR : A_OTHER;
    case 13:
        return KEY_IS(s, n, "Fwd thread id")   ? A_FWD
               : KEY_IS(s, n, "Input Strides") ? A_SHAPE + S_STRIDES
               : KEY_IS(s, n, "In msg nelems") ? A_SHAPE + S_IN_NELEMS
                                               : A_OTHER;
    case 18:
        return KEY_IS(s, n, "Process Group Name") ? A_SHAPE + S_PG_NAME : A_OTHER;
    case 25:
        return KEY_IS(s, n, "Process Group Description") ? A_SHAPE + S_PG_DESC : A_OTHER;
    case 15:
        return KEY_IS(s, n, "Sequence number")   ? A_SEQ
               : KEY_IS(s, n, "Collective name") ? A_COLL
               : KEY_IS(s, n, "Concrete Inputs") ? A_SHAPE + S_CONCRETE
               : KEY_IS(s, n, "Total Allocated") ? A_TALLOC
                                                 : A_OTHER;
    default:
        return A_OTHER;
    }
}

/* A `str | None` field: its string code, -1 for null. */
HOT int
parse_str_or_null(Ctx *c, int32_t *code)
{
    if (c->p < c->end && *c->p == '"') {
        Str s;
        TRY(parse_string(c, &s));
        return intern(c, s.s, s.len, s.esc, code);
    }
    *code = -1;
    return parse_literal(c, "null");
}

/* Whether the string at c->p (its opening quote) is the one `prev` holds (a whole, valid
 * string's raw text, then a quote: the same string); stepped over, its code in *code, if so. */
HOT int
same_string(Ctx *c, const LastStr *prev, int32_t *code)
{
    Py_ssize_t n = prev->len;
    if (prev->code >= 0 && c->end - c->p > n + 1 && c->p[n + 1] == '"' && same_bytes(prev->s, c->p + 1, n)) {
        *code = prev->code;
        c->p += n + 2;
        return 1;
    }
    return 0;
}

/* parse_str_or_null for a field whose value often repeats the previous event's (ph, cat,
 * name): that one is compared first, and the hash table is skipped when it is the same. A
 * name is looked for among the names lately too (by the 24 bytes after its quote, the text
 * that follows a short name included: any text picks a slot, the comparison decides). */
HOT int
parse_repeated(Ctx *c, LastStr *last, int32_t *code)
{
    if (c->p < c->end && *c->p == '"') {
        LastStr *seen = NULL;
        if (same_string(c, last, code))
            return OK;
        if (last == &c->last[2] && c->end - c->p > 24) { /* a name: those lately, too */
            uint64_t a, b, d;
            memcpy(&a, c->p + 1, 8);
            memcpy(&b, c->p + 9, 8);
            memcpy(&d, c->p + 17, 8);
            seen = &c->names[((a ^ b * 0x9e3779b97f4a7c15ULL ^ d * 0xc2b2ae3d27d4eb4fULL) * 0xff51afd7ed558ccdULL) >> 56];
            if (same_string(c, seen, code)) {
                *last = *seen;
                return OK;
            }
        }
        Str s;
        TRY(parse_string(c, &s));
        TRY(intern(c, s.s, s.len, s.esc, code));
        *last = (LastStr){s.s, s.len, *code};
        if (seen)
            *seen = *last;
        return OK;
    }
    *code = -1;
    return parse_literal(c, "null");
}

/* A `str | None` field of an event not kept: checked, not interned. */
HOT int
check_str_or_null(Ctx *c)
{
    if (c->p < c->end && *c->p == '"') {
        Str s;
        return parse_string(c, &s);
    }
    return parse_literal(c, "null");
}

/* An `int | str | None` id field of an event not kept: checked as parse_id checks it. */
HOT int
check_id(Ctx *c)
{
    uint8_t ch = c->p < c->end ? *c->p : 0;
    if (ch == '-' || IS_DIGIT(ch)) {
        Num n;
        TRY(parse_number(c, &n, 0));
        return !n.is_int || n.len - n.neg > MAX_INT_DIGITS ? FAIL : OK;
    }
    return check_str_or_null(c);
}

/* An `int | str | None` id field (ints modulo 2**64, strings by code and an idstr bit). */
HOT int
parse_id(Ctx *c, Ev *ev, int slot, Tok *tok)
{
    if (ev->skip)
        return check_id(c);
    Tok t = {TOK_NONE, NULL, 0, -1};
    uint8_t ch = c->p < c->end ? *c->p : 0;
    if (ch == '"') {
        TRY(parse_str_or_null(c, &t.code));
        t.type = TOK_STR;
        ev->ids[slot] = t.code;
        ev->idstr |= (uint8_t)(1u << slot);
    }
    else if (ch == '-' || IS_DIGIT(ch)) {
        Num n;
        TRY(parse_number(c, &n, 1));
        if (!n.is_int || n.len - n.neg > MAX_INT_DIGITS)
            return FAIL;
        ev->ids[slot] = (int64_t)n.wrapped;
        t = (Tok){TOK_INT, n.s, n.len, -1};
    }
    else {
        TRY(parse_literal(c, "null"));
    }
    if (tok)
        *tok = t;
    return OK;
}

/* An `int | float | None` time field (its digits' values unread for an event not kept). */
HOT int
parse_time(Ctx *c, const Ev *ev, TimeTag *tag, Num *n)
{
    if (c->p < c->end && (*c->p == '-' || IS_DIGIT(*c->p))) {
        *tag = T_NUM;
        return parse_number(c, n, !ev->skip);
    }
    *tag = T_NULL;
    return parse_literal(c, "null");
}

/* args.bytes: `int | float | str | None`; the column holds the numbers, NaN otherwise. */
HOT int
parse_bytes(Ctx *c, double *out)
{
    uint8_t ch = c->p < c->end ? *c->p : 0;
    *out = NAN;
    if (ch == '"') {
        Str s;
        return parse_string(c, &s);
    }
    if (ch == '-' || IS_DIGIT(ch)) {
        Num n;
        TRY(parse_number(c, &n, 1));
        if (!n.is_int)
            return num_double(&n, out);
        if (n.len - n.neg > 18)
            return FAIL;
        *out = (double)(int64_t)n.wrapped;
        return OK;
    }
    return parse_literal(c, "null");
}

/* An args value not read: checked and stepped over (a scalar here, a container by
 * skip_container). */
HOT int
skip_arg(Ctx *c)
{
    if (c->p < c->end && *c->p != '{' && *c->p != '[') {
        const uint8_t *q = scan_scalar(c->p, c->end);
        if (!q)
            return FAIL;
        c->p = q;
        return OK;
    }
    return skip_container(c, 3);
}

/* An args value kept as its JSON text (tracekit.schema.SHAPE_FIELDS): checked as skip_arg
 * checks it, and the bytes from its first to its last interned (raw, as they stand: escapes
 * and whitespace inside kept), *code -1 for null. The interner keys strings by the bytes
 * between their quotes and raw texts by their own bytes, in one table: equal bytes are equal
 * Python strings in both (an entry made from a string with an escape is decoded, but its bytes
 * never spell a raw text: a raw text holding a backslash holds a string, whose opening quote
 * is not escaped, and the bytes between a string's quotes have no quote that is not). */
HOT int
parse_raw(Ctx *c, int32_t *code)
{
    const uint8_t *p = c->p;
    if (p < c->end && *p == 'n') {
        *code = -1;
        return parse_literal(c, "null");
    }
    if (p < c->end && (*p == '{' || *p == '['))
        return raw_container(c, 3, code);
    TRY(skip_arg(c));
    return intern(c, p, c->p - p, 0, code);
}

/* An `int | float | str | None` field read as an int (Device Type, Device Id): the int when
 * it is one (as parse_bytes reads it: longer ones are msgspec's), else -1 (a float is checked
 * as msgspec checks it). */
HOT int
parse_small_int(Ctx *c, int64_t *out)
{
    uint8_t ch = c->p < c->end ? *c->p : 0;
    *out = -1;
    if (ch == '-' || IS_DIGIT(ch)) {
        Num n;
        TRY(parse_number(c, &n, 1));
        if (!n.is_int) {
            double unused;
            return num_double(&n, &unused);
        }
        if (n.len - n.neg > 18)
            return FAIL;
        *out = (int64_t)n.wrapped;
        return OK;
    }
    double unused; /* a string or null */
    return parse_bytes(c, &unused);
}

HOT int
parse_args_field(Ctx *c, Ev *ev, int key)
{
    switch (key) {
    case A_CORR:
        return parse_id(c, ev, I_CORR, NULL);
    case A_SEQ:
        return parse_id(c, ev, I_SEQ, NULL);
    case A_FWD:
        return parse_id(c, ev, I_FWD, NULL);
    case A_WCORR: /* an event with both it and "Sequence number" is refused (first_time) */
        return parse_id(c, ev, I_SEQ, NULL);
    case A_WSTREAM:
        return parse_id(c, ev, I_FWD, NULL);
    case A_STREAM:
        return parse_id(c, ev, I_STREAM, NULL);
    case A_COLL:
        return ev->skip ? check_str_or_null(c) : parse_str_or_null(c, &ev->coll);
    case A_BYTES:
        return parse_bytes(c, &ev->nbytes);
    case A_MBYTES:
        return parse_bytes(c, &ev->mbytes);
    case A_SIZE:
        return parse_bytes(c, &ev->size);
    case A_DEVTYPE:
        return parse_small_int(c, &ev->devtype);
    case A_DEVID:
        return parse_small_int(c, &ev->devid);
    case A_TALLOC:
        return parse_bytes(c, &ev->talloc);
    case A_TRES:
        return parse_bytes(c, &ev->tres);
    case A_ADDR:
        return parse_id(c, ev, I_ADDR, NULL);
    case A_NAME:
        return ev->skip ? check_str_or_null(c) : parse_str_or_null(c, &ev->argname);
    case A_OTHER:
        return skip_arg(c);
    default: /* A_SHAPE + S_*: kept as text */
        return ev->skip ? skip_arg(c) : parse_raw(c, &ev->shape[key - A_SHAPE]);
    }
}

/* Args fields stored in one column: an event with both is left to msgspec (its rule: the
 * first of each pair when not null, tracekit.columns). */
#define TWINS_SEQ ((1u << A_SEQ) | (1u << A_WCORR))
#define TWINS_FWD ((1u << A_FWD) | (1u << A_WSTREAM))

/* A duplicate of a field the reader uses: msgspec keeps the last, which is left to it. */
HOT int
first_time(unsigned *seen, int key, int other)
{
    if (key == other)
        return OK;
    if (*seen & (1u << key))
        return FAIL;
    *seen |= 1u << key;
    if (other == A_OTHER && ((*seen & TWINS_SEQ) == TWINS_SEQ || (*seen & TWINS_FWD) == TWINS_FWD))
        return FAIL;
    return OK;
}

/* The key of an object member, its opening quote at p: a plain string (an escaped key could
 * spell a field's name: refused); returns the byte after its closing quote, NULL if refused,
 * with *k its field (K_* or A_*). */
typedef const uint8_t *(*KeyFn)(const uint8_t *p, const uint8_t *end, int *k);
typedef int (*FieldFn)(Ctx *c, Ev *ev, int k);

HOT const uint8_t *
plain_key(const uint8_t *p, const uint8_t *end, Str *key)
{
    int esc = 0;
    const uint8_t *q = scan_string(p, end, &esc);
    if (!q || esc)
        return NULL;
    *key = (Str){p + 1, q - 1 - (p + 1), 0};
    return q;
}

HOT const uint8_t *
args_key_at(const uint8_t *p, const uint8_t *end, int *k)
{
    Str key;
    const uint8_t *q = plain_key(p, end, &key);
    if (q)
        *k = args_key(&key);
    return q;
}

#if PY_LITTLE_ENDIAN
/* The bytes of a string literal (up to eight) as the low bytes of a word: a constant. */
#define LIT_BYTE(s, i) ((i) < sizeof(s) - 1 ? (uint64_t)(uint8_t)(s)[(i) < sizeof(s) - 1 ? (i) : 0] << (8 * (i)) : 0)
#define WORD_OF(s)                                                                                  \
    (LIT_BYTE(s, 0) | LIT_BYTE(s, 1) | LIT_BYTE(s, 2) | LIT_BYTE(s, 3) | LIT_BYTE(s, 4) | LIT_BYTE(s, 5) | \
     LIT_BYTE(s, 6) | LIT_BYTE(s, 7))
#define QUOTED(w, lit, n) (((w) & (~0ULL >> (64 - 8 * (n)))) == WORD_OF(lit))
#endif

HOT const uint8_t *
event_key_at(const uint8_t *p, const uint8_t *end, int *k)
{
#if PY_LITTLE_ENDIAN
    /* The usual keys, quotes and all, in one word (the closing quote ends the string there). */
    if (end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        switch (p[1]) {
        case 'p':
            if (QUOTED(w, "\"ph\"", 4))
                return *k = K_PH, p + 4;
            if (QUOTED(w, "\"pid\"", 5))
                return *k = K_PID, p + 5;
            break;
        case 't':
            if (QUOTED(w, "\"ts\"", 4))
                return *k = K_TS, p + 4;
            if (QUOTED(w, "\"tid\"", 5))
                return *k = K_TID, p + 5;
            break;
        case 'c':
            if (QUOTED(w, "\"cat\"", 5))
                return *k = K_CAT, p + 5;
            break;
        case 'n':
            if (QUOTED(w, "\"name\"", 6))
                return *k = K_NAME, p + 6;
            break;
        case 'd':
            if (QUOTED(w, "\"dur\"", 5))
                return *k = K_DUR, p + 5;
            break;
        case 'a':
            if (QUOTED(w, "\"args\"", 6))
                return *k = K_ARGS, p + 6;
            break;
        default:
            break;
        }
    }
#endif
    Str key;
    const uint8_t *q = plain_key(p, end, &key);
    if (q)
        *k = event_key(&key);
    return q;
}

/* One member of an object, c->p at its key's opening quote: its field found by key_at, its
 * value read by field(k) with c->p at it; a second member of a field the reader uses (not
 * `other`, `seen` says which came) is refused. */
HOT int
member(Ctx *c, Ev *ev, KeyFn key_at, FieldFn field, int other, unsigned *seen)
{
    int k;
    const uint8_t *p = c->p, *end = c->end, *q;
    if (p >= end || *p != '"' || !(q = key_at(p, end, &k)))
        return FAIL;
    TRY(first_time(seen, k, other));
    if (!(q = after_sep(q, end, ':')))
        return FAIL;
    c->p = q;
    return field(c, ev, k);
}

/* The members of an object after one, c->p just past its value, to the closing '}'. */
HOT int
more_members(Ctx *c, Ev *ev, KeyFn key_at, FieldFn field, int other, unsigned seen)
{
    const uint8_t *end = c->end;
    for (;;) {
        const uint8_t *p = c->p, *q = after_sep(p, end, ',');
        if (!q) {
            p = ws(p, end);
            if (p >= end || *p != '}')
                return FAIL;
            c->p = p + 1;
            return OK;
        }
        c->p = q;
        TRY(member(c, ev, key_at, field, other, &seen));
    }
}

/* The members of an object at c->p ('{'), each read by member(). */
HOT int
parse_members(Ctx *c, Ev *ev, KeyFn key_at, FieldFn field, int other)
{
    unsigned seen = 0;
    const uint8_t *end = c->end;
    c->p = ws(c->p + 1, end);
    if (c->p < end && *c->p == '}') {
        c->p++;
        return OK;
    }
    TRY(member(c, ev, key_at, field, other, &seen));
    return more_members(c, ev, key_at, field, other, seen);
}

HOT int
event_field(Ctx *c, Ev *ev, int k)
{
    switch (k) {
    case K_PH:
        return parse_repeated(c, &c->last[0], &ev->ph);
    case K_CAT:
        return parse_repeated(c, &c->last[1], &ev->cat);
    case K_NAME:
        return parse_repeated(c, &c->last[2], &ev->name);
    case K_PID:
        return parse_id(c, ev, I_PID, &ev->pid);
    case K_TID:
        return parse_id(c, ev, I_TID, &ev->tid);
    case K_ID:
        return parse_id(c, ev, I_ID, NULL);
    case K_TS:
        return parse_time(c, ev, &ev->ts_tag, &ev->ts);
    case K_DUR:
        return parse_time(c, ev, &ev->dur_tag, &ev->dur);
    case K_ARGS:
        if (c->p < c->end && *c->p == '{')
            return parse_members(c, ev, args_key_at, parse_args_field, A_OTHER);
        return parse_literal(c, "null");
    default:
        if (c->p < c->end && (*c->p == '[' || *c->p == '{'))
            return skip_container(c, 2);
        return skip_value(c, 2);
    }
}

/* Whether converting this time as event_times does would decline (FAIL), for an event not
 * kept: its value is not needed, so the usual short decimals are not converted. */
HOT int
time_checked(const Ctx *c, TimeTag tag, const Num *n)
{
    if (tag != T_NUM)
        return OK;
    if (c->text_times) /* time_text declines these alone */
        return n->has_exp || n->len > TEXT_WIDE ? FAIL : OK;
    if (n->is_int)
        return n->len - n->neg > 18 ? FAIL : OK;
    if (!n->has_exp && n->nint + n->nfrac <= 19) /* num_double never declines these */
        return OK;
    double f; /* num_double reads the text here (mag and frac are not read without values) */
    return num_double(n, &f);
}

/* Whether the n bytes at p (7 <= n <= 16) are those of lit; false too when fewer than 16
 * bytes are left. Two words, the second overlapping the first (the literal's words are
 * constants). */
HOT int
at_literal(const uint8_t *p, const uint8_t *end, const char *lit, size_t n)
{
    uint64_t a, b, x, y;
    if (end - p < 16)
        return 0;
    memcpy(&a, p, 8);
    memcpy(&x, lit, 8); /* n >= 7: the literal and its NUL hold eight bytes */
    if (n < 8)
        return ((a ^ x) & (~0ULL >> 8 * (8 - n))) == 0;
    memcpy(&b, p + n - 8, 8);
    memcpy(&y, lit + n - 8, 8);
    return a == x && b == y;
}

/* One member of an event in Kineto's usual form: the literal `lit` (the separator before it,
 * the quoted key, ": ") at c->p, then field `key`'s value. Returns 1 when read, 0 when the text
 * is not that literal (nothing read: the general loop takes over), < 0 to refuse. */
HOT int
usual_member(Ctx *c, Ev *ev, const char *lit, size_t n, int key, unsigned *seen)
{
    if (!at_literal(c->p, c->end, lit, n))
        return 0;
    c->p = ws(c->p + n, c->end);
    int r = event_field(c, ev, key);
    if (r != OK)
        return r;
    *seen |= 1u << key;
    return 1;
}

/* The event's triple, its ph, cat and name read, when it is known already: whether the event
 * is kept is known then, and the values of one that is not are only checked. (A triple is
 * classified when first complete, at the end of its first event, as before.) */
HOT int
known_triple(Ctx *c, Ev *ev)
{
    int32_t key[3] = {ev->ph, ev->cat, ev->name}, t;
    size_t slot;
    TRY(triple_find(c, key, &t, &slot));
    if (t >= 0) {
        int8_t cls = c->triples.cls[t];
        ev->triple = t;
        ev->skip = cls < 0 && cls != CLASS_METADATA;
    }
    return OK;
}

/* The members of the event at c->p ('{'), as parse_members reads them: Kineto writes its keys
 * in one order with one spacing, which is tried first, member by member, the general loop
 * going on from the first member that is not in that form. */
HOT int
event_members(Ctx *c, Ev *ev)
{
    unsigned seen = 0;
    int r = usual_member(c, ev, "{\"ph\": ", 7, K_PH, &seen);
    if (r <= 0)
        return r < 0 ? r : parse_members(c, ev, event_key_at, event_field, K_OTHER);
#define USUAL(lit, key)                                                 \
    if ((r = usual_member(c, ev, lit, sizeof(lit) - 1, key, &seen)) <= 0) \
        goto rest;
    USUAL(", \"cat\": ", K_CAT)
    USUAL(", \"name\": ", K_NAME)
    TRY(known_triple(c, ev));
    USUAL(", \"pid\": ", K_PID)
    USUAL(", \"tid\": ", K_TID)
    USUAL(", \"ts\": ", K_TS)
    USUAL(", \"dur\": ", K_DUR)
    USUAL(", \"args\": ", K_ARGS)
#undef USUAL
rest:
    if (r < 0)
        return r;
    return more_members(c, ev, event_key_at, event_field, K_OTHER, seen);
}

/* ts and dur of one event, as the Python side expects them for this scan's mode. */
HOT int
event_times(Ctx *c, const Ev *ev, int64_t *ts, int64_t *dur, uint8_t *flags)
{
    *ts = *dur = 0;
    *flags = 0;
    if (c->text_times) {
        int ok = 0;
        if (ev->ts_tag == T_NUM) {
            TRY(time_text(&ev->ts, ts, &ok));
            *flags |= ok ? TS_OK : 0;
        }
        ok = 1; /* a missing or null dur is 0 */
        if (ev->dur_tag == T_NUM)
            TRY(time_text(&ev->dur, dur, &ok));
        *flags |= ok ? DUR_OK : 0;
        return OK;
    }
    if (ev->ts_tag == T_NUM)
        TRY(time_number(&ev->ts, ts, flags, TS_OK, TS_FLOAT, TS_BIG));
    if (ev->dur_tag == T_NUM)
        TRY(time_number(&ev->dur, dur, flags, DUR_OK, DUR_FLOAT, DUR_BIG));
    else
        *flags |= DUR_OK; /* None is 0 (an int) */
    return OK;
}

static int
grow_cols(Cols *k, size_t need)
{
    if (need <= k->cap)
        return OK;
    size_t cap = k->cap, c2;
#define G(arr)                                                 \
    c2 = cap;                                                  \
    TRY(grow((void **)&(arr), sizeof(*(arr)), need, &c2));
    G(k->kind);
    G(k->triple);
    for (int i = 0; i < N_IDS; i++) {
        G(k->ids[i]);
    }
    G(k->idstr);
    G(k->ts);
    G(k->dur);
    G(k->tflags);
    G(k->nbytes);
    G(k->coll);
    for (int i = 0; i < N_SHAPES; i++) {
        G(k->shape[i]);
    }
    G(k->devtype);
    G(k->devid);
    G(k->talloc);
    G(k->tres);
#undef G
    k->cap = c2;
    return OK;
}

/* The event at c->p ('{'), parsed, counted under its triple, and appended to the columns when
 * its triple's class keeps it (a metadata event to the names, when it has an args.name). Every
 * event is read and its times checked, kept or not: what declines declines as before (the times
 * of an event not kept are converted only where that is the check). */
HOT int
parse_event(Ctx *c)
{
    Ev ev; /* what is read below is set here; ts and dur only when their tag says so */
    ev.ph = ev.cat = ev.name = ev.coll = ev.argname = ev.triple = -1;
    ev.skip = 0;
    ev.idstr = 0;
    ev.pid = ev.tid = (Tok){TOK_NONE, NULL, 0, -1};
    ev.ts_tag = ev.dur_tag = T_MISSING;
    for (int i = 0; i < N_IDS; i++)
        ev.ids[i] = -1;
    for (int i = 0; i < N_SHAPES; i++)
        ev.shape[i] = -1;
    ev.nbytes = ev.mbytes = ev.size = ev.talloc = ev.tres = NAN;
    ev.devtype = ev.devid = -1;
    TRY(event_members(c, &ev));
    int32_t t;
    int64_t ts, dur;
    uint8_t flags;
    if ((t = ev.triple) < 0)
        TRY(triple_code(c, ev.ph, ev.cat, ev.name, &t));
    int8_t cls = c->triples.cls[t];
    if (cls < 0) {
        TRY(time_checked(c, ev.ts_tag, &ev.ts));
        TRY(time_checked(c, ev.dur_tag, &ev.dur));
    }
    else {
        TRY(event_times(c, &ev, &ts, &dur, &flags));
    }
    c->triples.count[t]++;
    c->nall++;
    if (cls == CLASS_METADATA && ev.argname >= 0) {
        TRY(grow((void **)&c->meta, sizeof(MetaEnt), c->nmeta + 1, &c->metacap));
        c->meta[c->nmeta++] = (MetaEnt){t, ev.pid, ev.tid, ev.argname};
    }
    if (cls < 0)
        return OK;
    Cols *k = &c->cols;
    size_t i = k->n;
    TRY(grow_cols(k, i + 1));
    k->kind[i] = cls;
    k->triple[i] = t;
    k->ts[i] = ts;
    k->dur[i] = dur;
    k->tflags[i] = flags;
    for (int j = 0; j < N_IDS; j++)
        k->ids[j][i] = ev.ids[j];
    k->idstr[i] = ev.idstr;
    k->nbytes[i] = cls == CLASS_MEMORY                       ? ev.mbytes
                   : cls == CLASS_MEMCPY && isnan(ev.nbytes) ? ev.size
                                                             : ev.nbytes;
    k->devtype[i] = ev.devtype;
    k->devid[i] = ev.devid;
    k->talloc[i] = ev.talloc;
    k->tres[i] = ev.tres;
    k->coll[i] = ev.coll;
    for (int j = 0; j < N_SHAPES; j++)
        k->shape[j][i] = ev.shape[j];
    k->n = i + 1;
    return OK;
}

/* The events from c->p: "{...}, {...}" to the end (closed=0), or to a ']' (closed=1, c->p
 * left on it). */
static int
scan_events(Ctx *c, int closed)
{
    skip_ws(c);
    if (closed ? (c->p < c->end && *c->p == ']') : c->p == c->end)
        return OK;
    for (;;) {
        if (c->p >= c->end || *c->p != '{')
            return FAIL;
        TRY(parse_event(c));
        skip_ws(c);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            skip_ws(c);
            continue;
        }
        if (closed)
            return c->p < c->end && *c->p == ']' ? OK : FAIL;
        return c->p == c->end ? OK : FAIL;
    }
}

/* ------------------------------------------------------------------ results */

/* A string's decoded text: escapes resolved into buf (at least len bytes). */
static Py_ssize_t
unescape(const uint8_t *s, Py_ssize_t len, char *buf)
{
    Py_ssize_t o = 0;
    for (Py_ssize_t i = 0; i < len;) {
        if (s[i] != '\\') {
            buf[o++] = (char)s[i++];
            continue;
        }
        uint8_t e = s[i + 1];
        if (e != 'u') { /* checked: one of the simple escapes */
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            buf[o++] = to[strchr(from, e) - from];
            i += 2;
            continue;
        }
        unsigned u = 0, lo = 0;
        hex4(s + i + 2, s + len, &u);
        i += 6;
        if (u >= 0xd800 && u <= 0xdbff) { /* checked: a low surrogate follows */
            hex4(s + i + 2, s + len, &lo);
            u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
            i += 6;
        }
        if (u < 0x80)
            buf[o++] = (char)u;
        else if (u < 0x800) {
            buf[o++] = (char)(0xc0 | (u >> 6));
            buf[o++] = (char)(0x80 | (u & 0x3f));
        }
        else if (u < 0x10000) {
            buf[o++] = (char)(0xe0 | (u >> 12));
            buf[o++] = (char)(0x80 | ((u >> 6) & 0x3f));
            buf[o++] = (char)(0x80 | (u & 0x3f));
        }
        else {
            buf[o++] = (char)(0xf0 | (u >> 18));
            buf[o++] = (char)(0x80 | ((u >> 12) & 0x3f));
            buf[o++] = (char)(0x80 | ((u >> 6) & 0x3f));
            buf[o++] = (char)(0x80 | (u & 0x3f));
        }
    }
    return o;
}

static PyObject *
make_str(const StrEnt *e)
{
    if (!e->esc)
        return PyUnicode_DecodeUTF8((const char *)e->s, e->len, "strict");
    char *buf = malloc((size_t)e->len + 1); /* an escape never decodes longer than itself */
    if (!buf)
        return PyErr_NoMemory();
    Py_ssize_t n = unescape(e->s, e->len, buf);
    PyObject *s = PyUnicode_DecodeUTF8(buf, n, "strict");
    free(buf);
    return s;
}

static PyObject *
make_strings(Ctx *c)
{
    PyObject *list = PyList_New((Py_ssize_t)c->strs.n);
    if (!list)
        return NULL;
    for (size_t i = 0; i < c->strs.n; i++) {
        PyObject *s = i < c->pystrcap && c->pystr[i] ? Py_NewRef(c->pystr[i]) : make_str(&c->strs.ents[i]);
        if (!s) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, s);
    }
    return list;
}

static PyObject *
tok_object(const Tok *t, PyObject *strings)
{
    if (t->type == TOK_STR) {
        PyObject *s = PyList_GET_ITEM(strings, t->code);
        Py_INCREF(s);
        return s;
    }
    if (t->type == TOK_INT) { /* at most MAX_INT_DIGITS digits and a sign */
        char buf[MAX_INT_DIGITS + 2];
        memcpy(buf, t->s, (size_t)t->len);
        buf[t->len] = 0;
        return PyLong_FromString(buf, NULL, 10);
    }
    Py_RETURN_NONE;
}

static PyObject *
make_meta(Ctx *c, PyObject *strings)
{
    PyObject *list = PyList_New((Py_ssize_t)c->nmeta);
    if (!list)
        return NULL;
    for (size_t i = 0; i < c->nmeta; i++) {
        MetaEnt *m = &c->meta[i];
        PyObject *name = PyList_GET_ITEM(strings, m->argname), *t = NULL;
        PyObject *pid = tok_object(&m->pid, strings), *tid = pid ? tok_object(&m->tid, strings) : NULL;
        if (tid)
            t = Py_BuildValue("(iOOO)", (int)m->triple, pid, tid, name);
        Py_XDECREF(pid);
        Py_XDECREF(tid);
        if (!t) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    return list;
}

/* A column handed to Python: a malloc'd array the object owns, read through the buffer
 * protocol (read-only, as bytes are; numpy.frombuffer views it), freed with the object. */
typedef struct {
    PyObject_HEAD
    void *data;
    Py_ssize_t len;
} Column;

static void
column_dealloc(Column *o)
{
    free(o->data);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

static int
column_getbuffer(Column *o, Py_buffer *view, int flags)
{
    static char empty[1];
    return PyBuffer_FillInfo(view, (PyObject *)o, o->data ? o->data : empty, o->len, 0, flags);
}

static PyBufferProcs column_buffer = {(getbufferproc)column_getbuffer, NULL};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracekit._kineto.Column",
    .tp_basicsize = sizeof(Column),
    .tp_dealloc = (destructor)column_dealloc,
    .tp_as_buffer = &column_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One column of a scan (a read-only buffer).",
};

/* d[key] = the n elements of size elem at *arr, as a Column that owns them (*arr is then NULL).
 * The elements are copied into an array of their exact size and the scan's array is freed: the
 * scan's arrays are sized for every event of the text and a Column keeps only the kept ones
 * (about a third), and a big array shrunk in place by realloc leaves its freed tail as a hole
 * between the Columns a reader keeps until the frame is built, which the next slice's arrays do
 * not fit (1 GB gzip tile: 460 -> 619 MB peak with realloc; 496 MB with this copy). Freed
 * whole, the scan's arrays are reused by the next slice's scan. */
static int
put_column(PyObject *d, const char *key, void *arr, size_t n, size_t elem)
{
    void **p = (void **)arr;
    Column *col = PyObject_New(Column, &ColumnType);
    if (!col)
        return -1;
    col->data = NULL;
    col->len = (Py_ssize_t)(n * elem);
    if (n) {
        void *exact = malloc(n * elem);
        if (exact) {
            memcpy(exact, *p, n * elem);
            free(*p);
        }
        col->data = exact ? exact : *p; /* out of memory for the copy: keep the whole array */
        *p = NULL;
    }
    int r = PyDict_SetItemString(d, key, (PyObject *)col);
    Py_DECREF(col);
    return r;
}

static int
put_columns(PyObject *d, Ctx *c)
{
    Cols *k = &c->cols;
    size_t n = k->n;
    for (int i = 0; i < N_IDS; i++)
        if (put_column(d, ID_NAMES[i], &k->ids[i], n, sizeof(int64_t)) < 0)
            return -1;
    for (int i = 0; i < N_SHAPES; i++)
        if (put_column(d, SHAPE_NAMES[i], &k->shape[i], n, sizeof(int32_t)) < 0)
            return -1;
    if (put_column(d, "kind", &k->kind, n, sizeof(int8_t)) < 0 ||
        put_column(d, "classes", &c->triples.cls, c->triples.n, sizeof(int8_t)) < 0 ||
        put_column(d, "counts", &c->triples.count, c->triples.n, sizeof(int64_t)) < 0 ||
        put_column(d, "triple", &k->triple, n, sizeof(int32_t)) < 0 ||
        put_column(d, "triples", &c->triples.keys, 3 * c->triples.n, sizeof(int32_t)) < 0 ||
        put_column(d, "idstr", &k->idstr, n, 1) < 0 || put_column(d, "ts", &k->ts, n, sizeof(int64_t)) < 0 ||
        put_column(d, "dur", &k->dur, n, sizeof(int64_t)) < 0 || put_column(d, "tflags", &k->tflags, n, 1) < 0 ||
        put_column(d, "bytes", &k->nbytes, n, sizeof(double)) < 0 ||
        put_column(d, "collective", &k->coll, n, sizeof(int32_t)) < 0 ||
        put_column(d, "device_type", &k->devtype, n, sizeof(int64_t)) < 0 ||
        put_column(d, "device_id", &k->devid, n, sizeof(int64_t)) < 0 ||
        put_column(d, "total_allocated", &k->talloc, n, sizeof(double)) < 0 ||
        put_column(d, "total_reserved", &k->tres, n, sizeof(double)) < 0)
        return -1;
    return 0;
}

/* The result dict of a successful scan. */
static PyObject *
make_result(Ctx *c, Py_ssize_t stop)
{
    PyObject *d = PyDict_New(), *strings = NULL, *meta = NULL, *v = NULL;
    if (!d || !(strings = make_strings(c)) || !(meta = make_meta(c, strings)))
        goto error;
    if (PyDict_SetItemString(d, "strings", strings) < 0 || PyDict_SetItemString(d, "meta", meta) < 0)
        goto error;
    if (!(v = PyLong_FromSize_t(c->nall)) || PyDict_SetItemString(d, "n", v) < 0)
        goto error;
    Py_CLEAR(v);
    if (!(v = PyLong_FromSize_t(c->cols.n)) || PyDict_SetItemString(d, "kept", v) < 0)
        goto error;
    Py_CLEAR(v);
    if (!(v = PyLong_FromSsize_t(stop)) || PyDict_SetItemString(d, "end", v) < 0)
        goto error;
    Py_CLEAR(v);
    if (put_columns(d, c) < 0)
        goto error;
    Py_DECREF(strings);
    Py_DECREF(meta);
    return d;
error:
    Py_XDECREF(v);
    Py_XDECREF(strings);
    Py_XDECREF(meta);
    Py_XDECREF(d);
    return NULL;
}

static void
free_ctx(Ctx *c)
{
    free(c->strs.ents);
    free(c->strs.slots);
    free(c->triples.keys);
    free(c->triples.slots);
    free(c->triples.cls);
    free(c->triples.count);
    for (size_t i = 0; i < c->pystrcap; i++)
        Py_XDECREF(c->pystr[i]);
    free(c->pystr);
    free(c->cols.kind);
    free(c->cols.triple);
    for (int i = 0; i < N_IDS; i++)
        free(c->cols.ids[i]);
    free(c->cols.idstr);
    free(c->cols.ts);
    free(c->cols.dur);
    free(c->cols.tflags);
    free(c->cols.nbytes);
    free(c->cols.coll);
    for (int i = 0; i < N_SHAPES; i++)
        free(c->cols.shape[i]);
    free(c->cols.devtype);
    free(c->cols.devid);
    free(c->cols.talloc);
    free(c->cols.tres);
    free(c->meta);
    free(c->vcache);
}

static uint64_t SEED;

PyDoc_STRVAR(scan_doc,
             "scan(text, start, end, text_times, classify) -> dict | None\n\n"
             "Columns of the events in text[start:end] (end=None: up to the array's closing ']',\n"
             "whose offset is the result's 'end') that classify(ph, cat, name) keeps (>= 0);\n"
             "None when the run is not handled here (decode it with msgspec). See\n"
             "tracekit/_kineto.c and tracekit/native.py.");

static PyObject *
scan(PyObject *self, PyObject *args)
{
    PyObject *text, *end_obj, *classify_fn;
    Py_ssize_t start, end;
    (void)self;
    int text_times;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "OnOpO:scan", &text, &start, &end_obj, &text_times, &classify_fn))
        return NULL;
    if (!PyCallable_Check(classify_fn)) {
        PyErr_SetString(PyExc_TypeError, "scan: classify must be callable");
        return NULL;
    }
    if (PyObject_GetBuffer(text, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int closed = end_obj == Py_None;
    end = closed ? view.len : PyLong_AsSsize_t(end_obj);
    if (end == -1 && PyErr_Occurred()) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (start < 0 || start > end || end > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "scan: range outside the text");
        return NULL;
    }
    Ctx c;
    memset(&c, 0, sizeof c);
    c.p = (const uint8_t *)view.buf + start;
    c.end = (const uint8_t *)view.buf + end;
    c.text_times = text_times;
    c.seed = SEED;
    c.classify = classify_fn;
    for (int i = 0; i < 3; i++)
        c.last[i].code = -1;
    for (int i = 0; i < 256; i++)
        c.names[i].code = -1;
    /* Columns sized for one event per 192 bytes of text (Kineto's are 150-400): most scans
     * never copy them to grow; pages not written are never touched. */
    int r = (end - start) / 192 > 256 ? grow_cols(&c.cols, (size_t)((end - start) / 192)) : OK;
    if (end - start > (1 << 16)) /* no cache for short runs: its 16 KiB would not pay */
        c.vcache = calloc(VCACHE_SETS * VCACHE_WAYS, sizeof(VEnt));
    if (r == OK)
        r = scan_events(&c, closed);
    PyObject *result = NULL;
    if (r == OK)
        result = make_result(&c, c.p - (const uint8_t *)view.buf);
    else if (r == NOMEM)
        PyErr_NoMemory();
    else if (r == PYERR)
        result = NULL; /* the classifier's exception */
    else
        result = Py_NewRef(Py_None);
    free_ctx(&c);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kineto", "Kineto traceEvents text to columns (see tracekit/native.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__kineto(void)
{
    init_tables();
    if (PyType_Ready(&ColumnType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    PyObject *os = PyImport_ImportModule("os");
    PyObject *rnd = os ? PyObject_CallMethod(os, "urandom", "i", 8) : NULL;
    Py_XDECREF(os);
    if (!rnd) {
        Py_DECREF(m);
        return NULL;
    }
    memcpy(&SEED, PyBytes_AS_STRING(rnd), 8);
    Py_DECREF(rnd);
    if (PyModule_AddIntConstant(m, "TS_OK", TS_OK) < 0 || PyModule_AddIntConstant(m, "DUR_OK", DUR_OK) < 0 ||
        PyModule_AddIntConstant(m, "TS_FLOAT", TS_FLOAT) < 0 || PyModule_AddIntConstant(m, "TS_BIG", TS_BIG) < 0 ||
        PyModule_AddIntConstant(m, "DUR_FLOAT", DUR_FLOAT) < 0 ||
        PyModule_AddIntConstant(m, "DUR_BIG", DUR_BIG) < 0 ||
        PyModule_AddIntConstant(m, "METADATA", CLASS_METADATA) < 0 ||
        PyModule_AddIntConstant(m, "MEMORY", CLASS_MEMORY) < 0 ||
        PyModule_AddIntConstant(m, "MEMCPY", CLASS_MEMCPY) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
