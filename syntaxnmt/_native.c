/* Native CPU kernels of incremental decoding: a search step's log-softmax top-k and single-query attention.
 *
 * An optional C extension (pyproject.toml builds it at pip install; without a C compiler the
 * install goes on and syntaxnmt.runtime.native_kernels() is None, so decoding keeps PyTorch's
 * operators). Two kernels, each replacing a chain of small PyTorch operators and their copies at
 * the shapes of beam search on the CPU (docs/deployment.md, "The native search step"):
 *
 * log_softmax_topk(x, rows, V, k, values, indices, lse, forbidden, n_forbidden): for a row x of V
 * logits, log_softmax(x)_j = x_j - m - log(sum_i exp(x_i - m)) with m = max_i x_i, and beam search
 * reads only the k largest of them. A row is read three times (its maximum, the sum of exps with an
 * 8-wide polynomial exp, its k largest logits outside the forbidden columns, which still count in
 * the sum) and only k values, k indices and the row's log-sum-exp are written. Addresses of
 * float32 x (rows, V), float32 values (rows, k), int64 indices (rows, k), float32 lse (rows,) and
 * int64 forbidden (n_forbidden,). Used by syntaxnmt.decoding.native.
 *
 * self_attention and cross_attention (below): one query per row and head, reading keys and values
 * where they are instead of copies of the caches. Used by syntaxnmt.model.attention.
 *
 * Every function releases the GIL, so batches (or rows) can run in threads side by side. The fast
 * paths need AVX2 and FMA (checked at import: vectorized()); the scalar ones are for tests.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define SYNTAXNMT_X86 1
#endif

static int use_avx2 = 0; /* set at import: the CPU has AVX2 and FMA */

/* Insert (v, j) into the k best so far, kept sorted in descending order; v > values[k - 1]. */
static inline void insert(float v, int64_t j, float *values, int64_t *indices, int64_t k) {
    int64_t p = k - 1;
    while (p > 0 && v > values[p - 1]) {
        values[p] = values[p - 1];
        indices[p] = indices[p - 1];
        p--;
    }
    values[p] = v;
    indices[p] = j;
}

static inline int is_forbidden(int64_t j, const int64_t *forbidden, int64_t n_forbidden) {
    for (int64_t i = 0; i < n_forbidden; i++)
        if (forbidden[i] == j) return 1;
    return 0;
}

static inline void consider(const float *x, int64_t j, float *values, int64_t *indices, int64_t k, const int64_t *forbidden, int64_t n_forbidden) {
    if (x[j] > values[k - 1] && !is_forbidden(j, forbidden, n_forbidden)) insert(x[j], j, values, indices, k);
}

#ifdef SYNTAXNMT_X86
/* exp of 8 floats <= 0 (Cephes' expf: e^x = 2^n e^r, |r| <= ln2/2, a degree-5 polynomial for e^r;
 * within 2 ulp of expf); inputs below -87 give e^-87 (about 1.6e-38): nothing in a sum of >= 1. */
__attribute__((target("avx2,fma"))) static inline __m256 exp8(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

__attribute__((target("avx2,fma"))) static inline float hsum8(__m256 v) {
    float t[8], s = 0.0f;
    _mm256_storeu_ps(t, v);
    for (int i = 0; i < 8; i++) s += t[i];
    return s;
}

__attribute__((target("avx2,fma"))) static void row_avx2(const float *x, int64_t V, int64_t k, float *values, int64_t *indices, float *lse, const int64_t *forbidden, int64_t n_forbidden) {
    int64_t j;
    /* 1. the maximum */
    __m256 m8 = _mm256_set1_ps(-INFINITY);
    for (j = 0; j + 8 <= V; j += 8) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(x + j));
    float t[8], m = -INFINITY;
    _mm256_storeu_ps(t, m8);
    for (int i = 0; i < 8; i++) m = t[i] > m ? t[i] : m;
    for (; j < V; j++) m = x[j] > m ? x[j] : m;
    /* 2. the sum of exps, two accumulators */
    __m256 mm = _mm256_set1_ps(m), s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    for (j = 0; j + 16 <= V; j += 16) {
        s0 = _mm256_add_ps(s0, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), mm)));
        s1 = _mm256_add_ps(s1, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j + 8), mm)));
    }
    for (; j + 8 <= V; j += 8) s0 = _mm256_add_ps(s0, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), mm)));
    float sum = hsum8(_mm256_add_ps(s0, s1));
    for (; j < V; j++) sum += expf(x[j] - m);
    /* 3. the k largest allowed logits: 8 compared with the k-th best at once */
    for (int64_t i = 0; i < k; i++) {
        values[i] = -INFINITY;
        indices[i] = 0;
    }
    for (j = 0; j + 8 <= V; j += 8) {
        int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + j), _mm256_set1_ps(values[k - 1]), _CMP_GT_OQ));
        while (mask) {
            int b = __builtin_ctz(mask);
            mask &= mask - 1;
            consider(x, j + b, values, indices, k, forbidden, n_forbidden);
        }
    }
    for (; j < V; j++) consider(x, j, values, indices, k, forbidden, n_forbidden);
    float log_sum = logf(sum);
    for (int64_t i = 0; i < k; i++) values[i] = (values[i] - m) - log_sum;
    *lse = m + log_sum;
}

static int cpu_has_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
static int cpu_has_avx2(void) { return 0; }
#endif

/* The same without vector instructions (expf of the C library). */
static void row_scalar(const float *x, int64_t V, int64_t k, float *values, int64_t *indices, float *lse, const int64_t *forbidden, int64_t n_forbidden) {
    float m = -INFINITY, sum = 0.0f;
    for (int64_t j = 0; j < V; j++) m = x[j] > m ? x[j] : m;
    for (int64_t j = 0; j < V; j++) sum += expf(x[j] - m);
    for (int64_t i = 0; i < k; i++) {
        values[i] = -INFINITY;
        indices[i] = 0;
    }
    for (int64_t j = 0; j < V; j++) consider(x, j, values, indices, k, forbidden, n_forbidden);
    float log_sum = logf(sum);
    for (int64_t i = 0; i < k; i++) values[i] = (values[i] - m) - log_sum;
    *lse = m + log_sum;
}



/* ---- Single-query attention of incremental decoding ------------------------------------------
 * One query per row and head against T keys: softmax(q.k_t * scale) weighted sum of the v_t
 * (Vaswani et al. 2017, Eq. 1), reading the keys where they are instead of copies: a decoder's
 * self-attention keys of step t are the rows (R_t, H, d) that step computed, and row r reads row
 * anc[r, t] of them (its hypothesis's ancestor at step t: beam search reorders this table, not
 * the cache); the cross-attention's keys are one (H, S, d) block per sentence, read by all the
 * sentence's rows (rowmap). */
static void attend_scalar(const float *q, const float **keys, const float **values, int64_t T, int64_t d, float scale, float *scores, float *out) {
    float m = -INFINITY, sum = 0.0f;
    for (int64_t t = 0; t < T; t++) {
        float s = 0.0f;
        for (int64_t i = 0; i < d; i++) s += q[i] * keys[t][i];
        scores[t] = s * scale;
        m = scores[t] > m ? scores[t] : m;
    }
    for (int64_t t = 0; t < T; t++) sum += (scores[t] = expf(scores[t] - m));
    for (int64_t i = 0; i < d; i++) out[i] = 0.0f;
    for (int64_t t = 0; t < T; t++) {
        float p = scores[t] / sum;
        for (int64_t i = 0; i < d; i++) out[i] += p * values[t][i];
    }
}

#ifdef SYNTAXNMT_X86
__attribute__((target("avx2,fma"))) static void attend_avx2(const float *q, const float **keys, const float **values, int64_t T, int64_t d, float scale, float *scores, float *out) {
    float m = -INFINITY;
    for (int64_t t = 0; t < T; t++) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t i = 0; i < d; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(keys[t] + i), acc);
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
        float s = _mm_cvtss_f32(h) * scale;
        scores[t] = s;
        m = s > m ? s : m;
    }
    __m256 mm = _mm256_set1_ps(m), s8 = _mm256_setzero_ps();
    int64_t t = 0;
    for (; t + 8 <= T; t += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(scores + t), mm));
        _mm256_storeu_ps(scores + t, e);
        s8 = _mm256_add_ps(s8, e);
    }
    float sum = hsum8(s8);
    for (; t < T; t++) sum += (scores[t] = expf(scores[t] - m));
    float inv = 1.0f / sum;
    for (int64_t i = 0; i < d; i += 8) {
        __m256 acc = _mm256_setzero_ps();
        for (t = 0; t < T; t++) acc = _mm256_fmadd_ps(_mm256_set1_ps(scores[t]), _mm256_loadu_ps(values[t] + i), acc);
        _mm256_storeu_ps(out + i, _mm256_mul_ps(acc, _mm256_set1_ps(inv)));
    }
}
#endif

static void attend(const float *q, const float **keys, const float **values, int64_t T, int64_t d, float scale, float *scores, float *out) {
#ifdef SYNTAXNMT_X86
    if (use_avx2 && d % 8 == 0) {
        attend_avx2(q, keys, values, T, d, scale, scores, out);
        return;
    }
#endif
    attend_scalar(q, keys, values, T, d, scale, scores, out);
}

/* Where the keys and values of one (row, head) are: fills keys and values (at most T each) and
 * returns how many. */
typedef int64_t (*locate_fn)(const void *where, int64_t r, int64_t h, const float **keys, const float **values);

/* The attention of every row and head of q (R, H, d) into out (R, H, d), the keys and values of
 * each found by locate; T: the most keys a row may have. Returns NULL with MemoryError set if
 * there is no room for T addresses, else None. */
static PyObject *attend_rows(const float *q, float *out, int64_t R, int64_t H, int64_t d, int64_t T, double scale, locate_fn locate, const void *where) {
    void *block = malloc(2 * T * sizeof(float *) + (T + 8) * sizeof(float));
    if (!block) return PyErr_NoMemory();
    const float **keys = (const float **)block, **values = keys + T;
    float *scores = (float *)(values + T);
    Py_BEGIN_ALLOW_THREADS;
    for (int64_t r = 0; r < R; r++)
        for (int64_t h = 0; h < H; h++) {
            int64_t n = locate(where, r, h, keys, values), at = (r * H + h) * d;
            attend(q + at, keys, values, n, d, (float)scale, scores, out + at);
        }
    Py_END_ALLOW_THREADS;
    free(block);
    Py_RETURN_NONE;
}

/* self_attention(q, R, H, d, T, key_steps, value_steps, step_rows, anc, out, scale): q and out
 * (R, H, d); key_steps and value_steps: T addresses of float32 (R_t, H, d) blocks, step_rows the
 * T counts R_t (int64); anc (R, T) int64, each anc[r, t] < R_t (checked). */
struct steps {
    const float *const *keys, *const *values;
    const int64_t *anc;
    int64_t H, d, T;
};

static int64_t locate_steps(const void *where, int64_t r, int64_t h, const float **keys, const float **values) {
    const struct steps *s = where;
    for (int64_t t = 0; t < s->T; t++) {
        int64_t off = (s->anc[r * s->T + t] * s->H + h) * s->d;
        keys[t] = s->keys[t] + off;
        values[t] = s->values[t] + off;
    }
    return s->T;
}

static PyObject *self_attention(PyObject *self, PyObject *args) {
    unsigned long long q, ks, vs, rs, anc, out;
    long long R, H, d, T;
    double scale;
    if (!PyArg_ParseTuple(args, "KLLLLKKKKKd", &q, &R, &H, &d, &T, &ks, &vs, &rs, &anc, &out, &scale)) return NULL;
    if (R < 0 || H < 1 || d < 1 || T < 1) {
        PyErr_SetString(PyExc_ValueError, "self_attention: R >= 0, H, d, T >= 1");
        return NULL;
    }
    struct steps where = {(const float *const *)(uintptr_t)ks, (const float *const *)(uintptr_t)vs, (const int64_t *)(uintptr_t)anc, H, d, T};
    const int64_t *step_rows = (const int64_t *)(uintptr_t)rs;
    for (long long i = 0; i < R * T; i++)
        if (where.anc[i] < 0 || where.anc[i] >= step_rows[i % T]) {
            PyErr_SetString(PyExc_IndexError, "self_attention: an ancestry entry is not a row of its step");
            return NULL;
        }
    return attend_rows((const float *)(uintptr_t)q, (float *)(uintptr_t)out, R, H, d, T, scale, locate_steps, &where);
}

/* cross_attention(q, R, H, d, N, S, k, v, rowmap, pad, out, scale): q and out (R, H, d); k and v
 * (N, H, S, d); rowmap (R,) int64: the block row r reads (< N, checked); pad: 0 or the address of
 * a uint8 (N, S) mask, nonzero at padding (skipped; a block must keep one key). */
struct blocks {
    const float *keys, *values;
    const int64_t *map;
    const uint8_t *pad;
    int64_t H, d, S;
};

static int64_t locate_blocks(const void *where, int64_t r, int64_t h, const float **keys, const float **values) {
    const struct blocks *b = where;
    int64_t n = b->map[r], T = 0;
    for (int64_t s = 0; s < b->S; s++) {
        if (b->pad && b->pad[n * b->S + s]) continue;
        int64_t off = ((n * b->H + h) * b->S + s) * b->d;
        keys[T] = b->keys + off;
        values[T++] = b->values + off;
    }
    return T;
}

static PyObject *cross_attention(PyObject *self, PyObject *args) {
    unsigned long long q, k, v, rowmap, pad, out;
    long long R, H, d, N, S;
    double scale;
    if (!PyArg_ParseTuple(args, "KLLLLLKKKKKd", &q, &R, &H, &d, &N, &S, &k, &v, &rowmap, &pad, &out, &scale)) return NULL;
    if (R < 0 || H < 1 || d < 1 || S < 1) {
        PyErr_SetString(PyExc_ValueError, "cross_attention: R >= 0, H, d, S >= 1");
        return NULL;
    }
    struct blocks where = {(const float *)(uintptr_t)k, (const float *)(uintptr_t)v, (const int64_t *)(uintptr_t)rowmap, (const uint8_t *)(uintptr_t)pad, H, d, S};
    for (long long r = 0; r < R; r++)
        if (where.map[r] < 0 || where.map[r] >= N) {
            PyErr_SetString(PyExc_IndexError, "cross_attention: a row's block is not one of the N blocks");
            return NULL;
        }
    return attend_rows((const float *)(uintptr_t)q, (float *)(uintptr_t)out, R, H, d, S, scale, locate_blocks, &where);
}

static PyObject *log_softmax_topk(PyObject *self, PyObject *args) {
    unsigned long long x, values, indices, lse, forbidden;
    long long rows, V, k, n_forbidden;
    if (!PyArg_ParseTuple(args, "KLLLKKKKL", &x, &rows, &V, &k, &values, &indices, &lse, &forbidden, &n_forbidden)) return NULL;
    if (rows < 0 || V < 1 || k < 1 || n_forbidden < 0) {
        PyErr_SetString(PyExc_ValueError, "log_softmax_topk: rows >= 0, V >= 1, k >= 1 and n_forbidden >= 0");
        return NULL;
    }
    const float *xs = (const float *)(uintptr_t)x;
    float *vs = (float *)(uintptr_t)values, *ls = (float *)(uintptr_t)lse;
    int64_t *is = (int64_t *)(uintptr_t)indices;
    const int64_t *fs = (const int64_t *)(uintptr_t)forbidden;
    Py_BEGIN_ALLOW_THREADS;
    for (long long r = 0; r < rows; r++) {
#ifdef SYNTAXNMT_X86
        if (use_avx2) {
            row_avx2(xs + r * V, V, k, vs + r * k, is + r * k, ls + r, fs, n_forbidden);
            continue;
        }
#endif
        row_scalar(xs + r * V, V, k, vs + r * k, is + r * k, ls + r, fs, n_forbidden);
    }
    Py_END_ALLOW_THREADS;
    Py_RETURN_NONE;
}

static PyObject *vectorized(PyObject *self, PyObject *args) { return PyBool_FromLong(use_avx2); }

static PyMethodDef methods[] = {
    {"log_softmax_topk", log_softmax_topk, METH_VARARGS, "k largest log-softmax values of each row, their columns and the rows' log-sum-exp (addresses, see the module source)"},
    {"self_attention", self_attention, METH_VARARGS, "single-query self-attention over the key/value blocks of the steps, through the ancestry table (see the module source)"},
    {"cross_attention", cross_attention, METH_VARARGS, "single-query attention over one key/value block per sentence (see the module source)"},
    {"vectorized", vectorized, METH_NOARGS, "True when the AVX2/FMA path runs (else the scalar one)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "Native CPU kernels of beam search (see syntaxnmt.decoding.native).", -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    use_avx2 = cpu_has_avx2();
    return PyModule_Create(&module);
}
