/* Native CPU kernels: beam search's log-softmax top-k and single-query attention; training's attention of short sequences, dropout (fused with a bias, ReLU or residual) and label-smoothed loss.
 *
 * An optional C extension (pyproject.toml builds it at pip install; without a C compiler the
 * install goes on and syntaxnmt.runtime.native_kernels() is None, so decoding keeps PyTorch's
 * operators). Each kernel replaces a chain of PyTorch operators and their copies at the shapes of
 * beam search (docs/deployment.md, "The native search step") or of training (docs/benchmarks.md,
 * "Native kernels of training") on the CPU:
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
 * attention_forward and attention_backward (below): whole-sequence attention of training and
 * scoring, per sentence and head, with its gradients. Used by syntaxnmt.model.native_attention.
 *
 * smoothed_xent (below): the label-smoothed cross-entropy of a chunk of logits and its gradient
 * in place. Used by syntaxnmt.training.losses.
 *
 * dropout_forward and dropout_backward (below): dropout with a counter-based generator, its mask
 * kept as bits, alone or fused with a bias, a ReLU and a residual. Used by syntaxnmt.model.dropout.
 *
 * Every function releases the GIL, so batches (or rows) can run in threads side by side. The fast
 * paths need AVX2 and FMA (checked at import: vectorized(); syntaxnmt.runtime.native_kernels() is
 * None without them); the decoding kernels' scalar paths are for tests, the training kernels have none.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- Attention of training and scoring: whole sequences, forward and backward ----------------
 * Per sentence b and head h (Vaswani et al. 2017, Eq. 1): S = scale * Q K^T, masked (keys at
 * padding; causal: key j <= query i), P = softmax(S) by rows (a row with no key left: zeros),
 * O = P V. The backward pass reads the P the forward pass kept:
 *     dV = P^T dO,   dP = dO V^T,   dS = P o (dP - rowsum(P o dP)),   dQ = scale dS K,   dK = scale dS^T Q
 * (the softmax's Jacobian; rowsum(P o dP) equals rowsum(dO o O)). At the short sentences of
 * sentence-level NMT (Multi30k batches: 12-32 positions, 4 heads, d 64) PyTorch's fused CPU kernel
 * spends most of its time per (sentence, head) block outside the arithmetic; these loops keep one
 * block's rows in the L1 cache and vectorize over the head dimension (d a multiple of 8). Used by
 * syntaxnmt.model.native_attention. Tensors are (B, H, L, d) views given by their address and
 * strides in elements (the head dimension contiguous), so the heads of a (B, L, H * d) projection
 * are read where they are. */
struct view {
    float *p;
    int64_t sb, sh, sl; /* element (b, h, l, c) at p[b * sb + h * sh + l * sl + c] */
    const int64_t *map; /* or, for packed rows: at p[map[b * L + l] * sl + h * sh + c] */
    int64_t L;
    float *absent;      /* the row of a position whose map entry is -1 (not among the packed rows) */
};

static inline float *at(const struct view *v, int64_t b, int64_t h, int64_t l) {
    if (v->map) {
        int64_t r = v->map[b * v->L + l];
        return r < 0 ? v->absent : v->p + r * v->sl + h * v->sh;
    }
    return v->p + b * v->sb + h * v->sh + l * v->sl;
}

/* (address, sb, sh, sl) or, for packed rows, (address, 0, sh, sl, map, L): map (B * L int64) gives
 * the packed row of each position, -1 for a position that has none; such a position reads zeros
 * and what is written there is dropped (the absent rows are set by the caller: set_absent). */
static int parse_view(PyObject *o, void *out) {
    struct view *v = out;
    unsigned long long p, map = 0;
    long long sb, sh, sl, L = 0;
    if (!PyArg_ParseTuple(o, "KLLL|KL", &p, &sb, &sh, &sl, &map, &L)) return 0;
    v->p = (float *)(uintptr_t)p;
    v->sb = sb, v->sh = sh, v->sl = sl;
    v->map = (const int64_t *)(uintptr_t)map, v->L = L, v->absent = NULL;
    return 1;
}

/* Point the absent rows of n views at buf (d floats, zeroed: reads give zeros, writes land there). */
static void set_absent(struct view *const *views, int n, float *buf) {
    for (int i = 0; i < n; i++) views[i]->absent = buf;
}

/* The arguments of an attention call's blocks; else False with ValueError set. */
static int blocks_ok(const char *name, long long b0, long long b1, long long H, long long Lq, long long Lk, long long d) {
    if (b0 < 0 || b1 < b0 || H < 1 || Lq < 1 || Lk < 1 || d < 8 || d % 8 || !use_avx2) {
        PyErr_Format(PyExc_ValueError, "%s: 0 <= b0 <= b1, H, Lq, Lk >= 1, d a multiple of 8, and an AVX2/FMA CPU", name);
        return 0;
    }
    return 1;
}

#ifdef SYNTAXNMT_X86
/* The dot products of a (d floats) with b0..b3, d a multiple of 8. */
__attribute__((target("avx2,fma"))) static inline __m128 dot4(const float *a, const float *b0, const float *b1, const float *b2, const float *b3, int64_t d) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t c = 0; c < d; c += 8) {
        __m256 x = _mm256_loadu_ps(a + c);
        s0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(b0 + c), s0);
        s1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(b1 + c), s1);
        s2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(b2 + c), s2);
        s3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(b3 + c), s3);
    }
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(s0, s1), _mm256_hadd_ps(s2, s3));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* out[j] = scale * (a . rows[j]) for n rows of d floats (one after another). Eight at a time
 * through one 256-bit store: a later 8-wide load of two 4-wide stores would miss the CPU's store
 * forwarding and stall (it did: 40 % of the forward pass). */
__attribute__((target("avx2,fma"))) static void dots(const float *a, const float *rows, int64_t n, int64_t d, float scale, float *out) {
    __m256 sc = _mm256_set1_ps(scale);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const float *r = rows + j * d;
        __m128 lo = dot4(a, r, r + d, r + 2 * d, r + 3 * d, d), hi = dot4(a, r + 4 * d, r + 5 * d, r + 6 * d, r + 7 * d, d);
        _mm256_storeu_ps(out + j, _mm256_mul_ps(_mm256_set_m128(hi, lo), sc));
    }
    for (; j + 4 <= n; j += 4) _mm_storeu_ps(out + j, _mm_mul_ps(dot4(a, rows + j * d, rows + (j + 1) * d, rows + (j + 2) * d, rows + (j + 3) * d, d), _mm256_castps256_ps128(sc)));
    for (; j < n; j++) {
        const float *r = rows + j * d;
        out[j] = scale * _mm_cvtss_f32(dot4(a, r, r, r, r, d));
    }
}

/* y = sum_j w[j] rows[j] over n rows of d floats; zero weights skipped. */
__attribute__((target("avx2,fma"))) static void weighted_sum(const float *w, const float *rows, int64_t n, int64_t d, float *y) {
    int64_t c = 0;
    for (; c + 32 <= d; c += 32) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t j = 0; j < n; j++) {
            if (w[j] == 0.0f) continue;
            __m256 p = _mm256_set1_ps(w[j]);
            const float *r = rows + j * d + c;
            a0 = _mm256_fmadd_ps(p, _mm256_loadu_ps(r), a0);
            a1 = _mm256_fmadd_ps(p, _mm256_loadu_ps(r + 8), a1);
            a2 = _mm256_fmadd_ps(p, _mm256_loadu_ps(r + 16), a2);
            a3 = _mm256_fmadd_ps(p, _mm256_loadu_ps(r + 24), a3);
        }
        _mm256_storeu_ps(y + c, a0);
        _mm256_storeu_ps(y + c + 8, a1);
        _mm256_storeu_ps(y + c + 16, a2);
        _mm256_storeu_ps(y + c + 24, a3);
    }
    for (; c < d; c += 8) {
        __m256 a = _mm256_setzero_ps();
        for (int64_t j = 0; j < n; j++)
            if (w[j] != 0.0f) a = _mm256_fmadd_ps(_mm256_set1_ps(w[j]), _mm256_loadu_ps(rows + j * d + c), a);
        _mm256_storeu_ps(y + c, a);
    }
}

/* y += w x (d floats). */
__attribute__((target("avx2,fma"))) static inline void axpy(float w, const float *x, float *y, int64_t d) {
    __m256 p = _mm256_set1_ps(w);
    for (int64_t c = 0; c < d; c += 8) _mm256_storeu_ps(y + c, _mm256_fmadd_ps(p, _mm256_loadu_ps(x + c), _mm256_loadu_ps(y + c)));
}

/* The probabilities of one query row in place: s (n scores, already scaled) -> softmax, zero at
 * padding (pad: Lk flags or NULL); a row with no key left becomes all zeros. A NaN or +inf score
 * (diverged weights) makes the row NaN, as in PyTorch's kernels: training must see it. */
__attribute__((target("avx2,fma"))) static void softmax_row(float *s, int64_t n, const uint8_t *pad) {
    float m = -INFINITY;
    int bad = 0;
    for (int64_t j = 0; j < n; j++) {
        if (pad && pad[j]) s[j] = -INFINITY;
        bad |= s[j] != s[j] || s[j] == INFINITY;
        m = s[j] > m ? s[j] : m;
    }
    if (bad) {
        for (int64_t j = 0; j < n; j++) s[j] = NAN;
        return;
    }
    if (m == -INFINITY) {
        for (int64_t j = 0; j < n; j++) s[j] = 0.0f;
        return;
    }
    __m256 mm = _mm256_set1_ps(m);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(s + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mm)));
    if (j < n) { /* the tail: a masked 8-wide load and store (no libm call per element) */
        __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - j)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_maskstore_ps(s + j, lanes, exp8(_mm256_sub_ps(_mm256_maskload_ps(s + j, lanes), mm)));
    }
    float sum = 0.0f;
    for (j = 0; j < n; j++) {
        if (pad && pad[j]) s[j] = 0.0f; /* exp8 stops at e^-87, not 0 */
        sum += s[j];
    }
    float inv = 1.0f / sum;
    for (j = 0; j < n; j++) s[j] *= inv;
}

/* Copy the L rows (d floats) of sentence b, head h of a view into a block of rows one after
 * another, or back (to_view). A block's rows lie 1 KB or more apart in the projections, so that
 * a head's rows of the seven arrays the backward pass reads would share a few L1 sets. */
__attribute__((target("avx2,fma"))) static inline void pack(const struct view *v, int64_t b, int64_t h, int64_t L, int64_t d, float *block, int to_view) {
    for (int64_t l = 0; l < L; l++) {
        float *r = at(v, b, h, l), *x = block + l * d;
        if (to_view)
            for (int64_t c = 0; c < d; c += 8) _mm256_storeu_ps(r + c, _mm256_loadu_ps(x + c));
        else
            for (int64_t c = 0; c < d; c += 8) _mm256_storeu_ps(x + c, _mm256_loadu_ps(r + c));
    }
}

/* Ask for the L rows of the next block (sentence b, head h) while this one computes: a head's rows
 * are 256-byte pieces 1 KB or more apart, a pattern the hardware prefetchers do not follow, and
 * the projections they come from are larger than L2. */
static inline void prefetch_block(const struct view *v, int64_t b, int64_t h, int64_t L, int64_t d) {
    for (int64_t l = 0; l < L; l++) {
        const char *r = (const char *)at(v, b, h, l);
        for (int64_t c = 0; c < (int64_t)(d * sizeof(float)); c += 64) __builtin_prefetch(r + c, 0, 3);
    }
}

/* Prefetch the rows of the block after (b, h) (in the order b, then h; none after sentence b1 - 1)
 * of the n views, views[i] with lengths[i] rows. */
static inline void prefetch_next(const struct view *const *views, const int64_t *lengths, int n, int64_t b, int64_t h, int64_t b1, int64_t H, int64_t d) {
    if (++h == H) h = 0, ++b;
    if (b >= b1) return;
    for (int i = 0; i < n; i++) prefetch_block(views[i], b, h, lengths[i], d);
}


/* work: 2 Lk d floats. */
__attribute__((target("avx2,fma"))) static void forward_block(const struct view *q, const struct view *k, const struct view *v, const struct view *o, float *P, const uint8_t *pad, int64_t b, int64_t h, int64_t Lq, int64_t Lk, int64_t d, int causal, float scale, float *work) {
    float *K = work, *V = K + Lk * d; /* the query rows are read once each: left where they are */
    pack(k, b, h, Lk, d, K, 0);
    pack(v, b, h, Lk, d, V, 0);
    for (int64_t i = 0; i < Lq; i++) {
        float *p = P + i * Lk;
        int64_t n = causal ? (i + 1 < Lk ? i + 1 : Lk) : Lk;
        dots(at(q, b, h, i), K, n, d, scale, p);
        softmax_row(p, n, pad);
        for (int64_t j = n; j < Lk; j++) p[j] = 0.0f;
        weighted_sum(p, V, n, d, at(o, b, h, i));
    }
}

/* work: (2 Lq + 2 Lk) d floats for Q, dO, K, V, then (Lq + 2 Lk) d for dQ, dK, dV, and Lk for dP. */
__attribute__((target("avx2,fma"))) static void backward_block(const struct view *q, const struct view *k, const struct view *v, const struct view *dout, const struct view *dq, const struct view *dk, const struct view *dv, const float *P, int64_t b, int64_t h, int64_t Lq, int64_t Lk, int64_t d, int causal, float scale, float *work) {
    float *Q = work, *G = Q + Lq * d, *K = G + Lq * d, *V = K + Lk * d, *dQ = V + Lk * d, *dK = dQ + Lq * d, *dV = dK + Lk * d, *dp = dV + Lk * d;
    pack(q, b, h, Lq, d, Q, 0);
    pack(dout, b, h, Lq, d, G, 0);
    pack(k, b, h, Lk, d, K, 0);
    pack(v, b, h, Lk, d, V, 0);
    memset(dK, 0, 2 * Lk * d * sizeof(float));
    for (int64_t i = 0; i < Lq; i++) {
        const float *p = P + i * Lk, *g = G + i * d, *qi = Q + i * d;
        int64_t n = causal ? (i + 1 < Lk ? i + 1 : Lk) : Lk;
        dots(g, V, n, d, 1.0f, dp);
        float D = 0.0f;
        for (int64_t j = 0; j < n; j++) D += p[j] * dp[j];
        for (int64_t j = 0; j < n; j++) dp[j] = p[j] * (dp[j] - D) * scale; /* now scale dS */
        weighted_sum(dp, K, n, d, dQ + i * d);
        for (int64_t j = 0; j < n; j++) {
            if (p[j] == 0.0f) continue;
            axpy(dp[j], qi, dK + j * d, d);
            axpy(p[j], g, dV + j * d, d);
        }
    }
    pack(dq, b, h, Lq, d, dQ, 1);
    pack(dk, b, h, Lk, d, dK, 1);
    pack(dv, b, h, Lk, d, dV, 1);
}
#endif

/* attention_forward(q, k, v, out, P, pad, b0, b1, H, Lq, Lk, d, causal, scale): q, k, v, out are
 * views (parse_view: strided, or packed rows with a row map); P: float32 (B, H, Lq, Lk) contiguous, written; pad: 0 or a uint8
 * (B, Lk) mask (nonzero at padding). Sentences b0 <= b < b1. */
static PyObject *attention_forward(PyObject *self, PyObject *args) {
    struct view q, k, v, o;
    unsigned long long P, pad;
    long long b0, b1, H, Lq, Lk, d;
    int causal;
    double scale;
    if (!PyArg_ParseTuple(args, "O&O&O&O&KKLLLLLLpd", parse_view, &q, parse_view, &k, parse_view, &v, parse_view, &o, &P, &pad, &b0, &b1, &H, &Lq, &Lk, &d, &causal, &scale)) return NULL;
    if (!blocks_ok("attention_forward", b0, b1, H, Lq, Lk, d)) return NULL;
#ifdef SYNTAXNMT_X86
    float *probs = (float *)(uintptr_t)P, *work = malloc(2 * Lk * d * sizeof(float)), *absent = calloc(2 * d, sizeof(float));
    if (!work || !absent) {
        free(work), free(absent);
        return PyErr_NoMemory();
    }
    struct view *reads[] = {&q, &k, &v}, *writes[] = {&o};
    set_absent(reads, 3, absent);
    set_absent(writes, 1, absent + d);
    const uint8_t *mask = (const uint8_t *)(uintptr_t)pad;
    Py_BEGIN_ALLOW_THREADS;
    for (int64_t b = b0; b < b1; b++)
        for (int64_t h = 0; h < H; h++) {
            const struct view *ahead[] = {&k, &v};
            const int64_t lengths[] = {Lk, Lk};
            prefetch_next(ahead, lengths, 2, b, h, b1, H, d);
            forward_block(&q, &k, &v, &o, probs + (b * H + h) * Lq * Lk, mask ? mask + b * Lk : NULL, b, h, Lq, Lk, d, causal, (float)scale, work);
        }
    Py_END_ALLOW_THREADS;
    free(work), free(absent);
#endif
    Py_RETURN_NONE;
}

/* attention_backward(q, k, v, dout, dq, dk, dv, P, b0, b1, H, Lq, Lk, d, causal, scale): views as
 * above (dq, dk, dv written, every element of sentences b0 <= b < b1); P as the forward wrote it. */
static PyObject *attention_backward(PyObject *self, PyObject *args) {
    struct view q, k, v, dout, dq, dk, dv;
    unsigned long long P;
    long long b0, b1, H, Lq, Lk, d;
    int causal;
    double scale;
    if (!PyArg_ParseTuple(args, "O&O&O&O&O&O&O&KLLLLLLpd", parse_view, &q, parse_view, &k, parse_view, &v, parse_view, &dout, parse_view, &dq, parse_view, &dk, parse_view, &dv, &P, &b0, &b1, &H, &Lq, &Lk, &d, &causal, &scale)) return NULL;
    if (!blocks_ok("attention_backward", b0, b1, H, Lq, Lk, d)) return NULL;
#ifdef SYNTAXNMT_X86
    float *work = malloc(((3 * Lq + 4 * Lk) * d + Lk) * sizeof(float)), *absent = calloc(2 * d, sizeof(float));
    if (!work || !absent) {
        free(work), free(absent);
        return PyErr_NoMemory();
    }
    struct view *reads[] = {&q, &k, &v, &dout}, *writes[] = {&dq, &dk, &dv};
    set_absent(reads, 4, absent);
    set_absent(writes, 3, absent + d);
    const float *probs = (const float *)(uintptr_t)P;
    Py_BEGIN_ALLOW_THREADS;
    for (int64_t b = b0; b < b1; b++)
        for (int64_t h = 0; h < H; h++) {
            const struct view *ahead[] = {&q, &dout, &dq, &k, &v, &dk, &dv};
            const int64_t lengths[] = {Lq, Lq, Lq, Lk, Lk, Lk, Lk};
            prefetch_next(ahead, lengths, 7, b, h, b1, H, d);
            backward_block(&q, &k, &v, &dout, &dq, &dk, &dv, probs + (b * H + h) * Lq * Lk, b, h, Lq, Lk, d, causal, (float)scale, work);
        }
    Py_END_ALLOW_THREADS;
    free(work), free(absent);
#endif
    Py_RETURN_NONE;
}

/* ---- The label-smoothed cross-entropy of training and its gradient, in one pass per row -------
 * smoothed_xent(z, rows, V, target, eps, loss, nll): for each row z of V logits (float32, rows x V,
 * overwritten) and its class y (int64), with lse = log sum_v exp(z_v):
 *     nll = lse - z_y,   loss = (1 - eps) nll + eps (lse - mean_v z_v)          (Szegedy et al. 2016)
 * written to loss[r] and nll[r] (float32), and z becomes dloss/dz = softmax(z) - eps / V - (1 - eps) onehot(y).
 * PyTorch's chain (log_softmax, gather, sum, exp_, sub_, index_put_) reads and writes a chunk of
 * logits 1,024 x 8,000 (32 MB, larger than the caches) about seven times; here a row (32 KB) is
 * read from memory once, twice more from the cache, and written once. Used by
 * syntaxnmt.training.losses. */
#ifdef SYNTAXNMT_X86
__attribute__((target("avx2,fma"))) static void xent_row(float *z, int64_t V, int64_t y, float eps, float *loss, float *nll) {
    const float zy = z[y];
    __m256 m8 = _mm256_set1_ps(-INFINITY), t8 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= V; j += 8) {
        __m256 x = _mm256_loadu_ps(z + j);
        m8 = _mm256_max_ps(m8, x);
        t8 = _mm256_add_ps(t8, x);
    }
    float t[8], m = -INFINITY, total = 0.0f;
    _mm256_storeu_ps(t, m8);
    for (int i = 0; i < 8; i++) m = t[i] > m ? t[i] : m;
    total = hsum8(t8);
    for (; j < V; j++) {
        m = z[j] > m ? z[j] : m;
        total += z[j];
    }
    if (!isfinite(total)) { /* a NaN or infinite logit (diverged weights): NaN loss and gradient, as in PyTorch */
        for (j = 0; j < V; j++) z[j] = NAN;
        *loss = *nll = NAN;
        return;
    }
    __m256 mm = _mm256_set1_ps(m), s0 = _mm256_setzero_ps(), s1 = s0;
    for (j = 0; j + 16 <= V; j += 16) {
        __m256 e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(z + j), mm)), e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(z + j + 8), mm));
        _mm256_storeu_ps(z + j, e0);
        _mm256_storeu_ps(z + j + 8, e1);
        s0 = _mm256_add_ps(s0, e0);
        s1 = _mm256_add_ps(s1, e1);
    }
    float sum = hsum8(_mm256_add_ps(s0, s1));
    for (; j < V; j++) sum += (z[j] = expf(z[j] - m));
    float lse = m + logf(sum);
    *nll = lse - zy;
    *loss = (1.0f - eps) * (lse - zy) + eps * (lse - total / (float)V);
    __m256 inv = _mm256_set1_ps(1.0f / sum), off = _mm256_set1_ps(eps / (float)V);
    for (j = 0; j + 8 <= V; j += 8) _mm256_storeu_ps(z + j, _mm256_fmsub_ps(_mm256_loadu_ps(z + j), inv, off));
    for (; j < V; j++) z[j] = z[j] / sum - eps / (float)V;
    z[y] -= 1.0f - eps;
}
#endif

static PyObject *smoothed_xent(PyObject *self, PyObject *args) {
    unsigned long long z, target, loss, nll;
    long long rows, V;
    double eps;
    if (!PyArg_ParseTuple(args, "KLLKdKK", &z, &rows, &V, &target, &eps, &loss, &nll)) return NULL;
    if (rows < 0 || V < 1 || !use_avx2) {
        PyErr_SetString(PyExc_ValueError, "smoothed_xent: rows >= 0, V >= 1, and an AVX2/FMA CPU");
        return NULL;
    }
    const int64_t *ys = (const int64_t *)(uintptr_t)target;
    for (long long r = 0; r < rows; r++)
        if (ys[r] < 0 || ys[r] >= V) {
            PyErr_SetString(PyExc_IndexError, "smoothed_xent: a target class is not one of the V columns");
            return NULL;
        }
#ifdef SYNTAXNMT_X86
    float *zs = (float *)(uintptr_t)z, *ls = (float *)(uintptr_t)loss, *ns = (float *)(uintptr_t)nll;
    Py_BEGIN_ALLOW_THREADS;
    for (long long r = 0; r < rows; r++) xent_row(zs + r * V, V, ys[r], (float)eps, ls + r, ns + r);
    Py_END_ALLOW_THREADS;
#endif
    Py_RETURN_NONE;
}

/* ---- Dropout of training: the mask drawn, applied and kept as bits in one pass ---------------
 * dropout_forward(x, out, bits, n, threshold, scale, seed, g0, g1): element i of x (float32) is
 * kept when the top 24 bits of its random word u_i are >= threshold (ceil(p 2^24): kept with
 * probability 1 - p, Srivastava et al. 2014) and scaled by 1 / (1 - p); out gets the result and
 * bit i of bits (uint8, 4 bytes per group) whether it was kept. Words come from Philox4x32-10
 * (Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2, 3"), a counter-based generator:
 * word w of counter 8g + l (key: the 64-bit seed) is element 32g + 8w + l, so each group g of 32
 * elements depends on the seed and g alone, whatever the threads' split (groups g0 <= g < g1).
 * dropout_backward(grad, out, bits, n, scale, g0, g1): out = grad scaled where kept, 0 elsewhere.
 * Fused forms, for the blocks of a Transformer layer (optional trailing arguments): the forward's
 * bias, cols, relu, residual give out = residual + dropout(relu(x + bias)) -- the ReLU's zeros
 * clear their bits too, so the bits alone give the gradient of x -- and the backward's colsum, cols
 * add the column sums of out (the bias's gradient) to a float64 array in the same pass.
 * Used by syntaxnmt.model.dropout. */
#ifdef SYNTAXNMT_X86
/* The high and low 32 bits of the products of the eight lanes of a with m. */
__attribute__((target("avx2,fma"))) static inline void mulhilo8(__m256i a, __m256i m, __m256i *hi, __m256i *lo) {
    __m256i even = _mm256_mul_epu32(a, m), odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
    *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

/* Philox4x32-10 of the counters (c0, c1, 0, 0) of eight lanes under key (k0, k1): four words each. */
__attribute__((target("avx2,fma"))) static inline void philox8(__m256i c0, __m256i c1, uint32_t k0, uint32_t k1, __m256i w[4]) {
    __m256i x0 = c0, x1 = c1, x2 = _mm256_setzero_si256(), x3 = x2, hi0, lo0, hi1, lo1;
    const __m256i m0 = _mm256_set1_epi32((int)0xD2511F53u), m1 = _mm256_set1_epi32((int)0xCD9E8D57u);
    for (int round = 0; round < 10; round++) {
        mulhilo8(x0, m0, &hi0, &lo0);
        mulhilo8(x2, m1, &hi1, &lo1);
        __m256i y0 = _mm256_xor_si256(_mm256_xor_si256(hi1, x1), _mm256_set1_epi32((int)k0));
        __m256i y2 = _mm256_xor_si256(_mm256_xor_si256(hi0, x3), _mm256_set1_epi32((int)k1));
        x0 = y0, x1 = lo1, x2 = y2, x3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    w[0] = x0, w[1] = x1, w[2] = x2, w[3] = x3;
}

/* Options of the fused forms (all off: plain dropout): a bias of cols columns added first, a ReLU
 * after it (a unit is kept only where it is positive too, so one bit serves both gradients), and a
 * residual added to the result. */
struct dropout_extra {
    const float *bias; /* NULL or (cols,) */
    int64_t cols;      /* the row length when bias: a multiple of 8 that divides n */
    int relu;
    const float *residual; /* NULL or (n,) */
};

__attribute__((target("avx2,fma"))) static void dropout_groups(const float *x, float *out, uint8_t *bits, int64_t n, int32_t threshold, float scale, uint64_t seed, int64_t g0, int64_t g1, const struct dropout_extra *e) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), below = _mm256_set1_epi32(threshold - 1);
    const __m256 sc = _mm256_set1_ps(scale), zero = _mm256_setzero_ps();
    for (int64_t g = g0; g < g1; g++) {
        uint64_t counter = (uint64_t)g * 8;
        __m256i w[4];
        philox8(_mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)counter), lane), _mm256_set1_epi32((int)(uint32_t)(counter >> 32)), (uint32_t)seed, (uint32_t)(seed >> 32), w);
        for (int k = 0; k < 4; k++) {
            int64_t i = g * 32 + k * 8;
            __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_srli_epi32(w[k], 8), below));
            if (i + 8 <= n) {
                __m256 v = _mm256_loadu_ps(x + i);
                if (e->bias) v = _mm256_add_ps(v, _mm256_loadu_ps(e->bias + i % e->cols));
                if (e->relu) keep = _mm256_and_ps(keep, _mm256_cmp_ps(v, zero, _CMP_GT_OQ));
                v = _mm256_mul_ps(v, _mm256_and_ps(sc, keep)); /* v * 0 keeps a NaN, as x * mask does */
                if (e->residual) v = _mm256_add_ps(_mm256_loadu_ps(e->residual + i), v);
                _mm256_storeu_ps(out + i, v);
                bits[g * 4 + k] = (uint8_t)_mm256_movemask_ps(keep);
            } else { /* the tail: no bias here (n is a multiple of cols, cols of 8) */
                int m = _mm256_movemask_ps(keep);
                for (int64_t j = i; j < n; j++) {
                    float v = x[j];
                    if (e->relu && !(v > 0.0f)) m &= ~(1 << (j - i));
                    v *= (m >> (j - i)) & 1 ? scale : 0.0f;
                    out[j] = e->residual ? e->residual[j] + v : v;
                }
                bits[g * 4 + k] = (uint8_t)m;
            }
        }
    }
}

/* colsum: NULL or (cols,) doubles, to which the column sums of out are added (a bias's gradient;
 * cols a multiple of 8 that divides n). */
__attribute__((target("avx2,fma"))) static void dropout_back_groups(const float *grad, float *out, const uint8_t *bits, int64_t n, float scale, int64_t g0, int64_t g1, double *colsum, int64_t cols) {
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256 sc = _mm256_set1_ps(scale);
    for (int64_t b = g0 * 4; b < g1 * 4; b++) {
        int64_t i = b * 8;
        if (i >= n) break;
        if (i + 8 <= n) {
            __m256i kept = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(bits[b]), bit), bit);
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(grad + i), _mm256_and_ps(sc, _mm256_castsi256_ps(kept)));
            _mm256_storeu_ps(out + i, v);
            if (colsum) {
                double *c = colsum + i % cols;
                _mm256_storeu_pd(c, _mm256_add_pd(_mm256_loadu_pd(c), _mm256_cvtps_pd(_mm256_castps256_ps128(v))));
                _mm256_storeu_pd(c + 4, _mm256_add_pd(_mm256_loadu_pd(c + 4), _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))));
            }
        } else
            for (int64_t j = i; j < n; j++) out[j] = grad[j] * ((bits[b] >> (j - i)) & 1 ? scale : 0.0f);
    }
}
#endif

static int columns_ok(const char *name, long long n, long long cols) {
    if (cols < 8 || cols % 8 || n % cols) {
        PyErr_Format(PyExc_ValueError, "%s: a bias or column sums need cols a multiple of 8 that divides n", name);
        return 0;
    }
    return 1;
}

static PyObject *dropout_forward(PyObject *self, PyObject *args) {
    unsigned long long x, out, bits, seed, bias = 0, residual = 0;
    long long n, g0, g1, cols = 0;
    int threshold, relu = 0;
    double scale;
    if (!PyArg_ParseTuple(args, "KKKLidKLL|KLpK", &x, &out, &bits, &n, &threshold, &scale, &seed, &g0, &g1, &bias, &cols, &relu, &residual)) return NULL;
    if (n < 0 || g0 < 0 || g1 < g0 || g1 * 32 > n + 31 || threshold < 1 || threshold > (1 << 24) || !use_avx2) {
        PyErr_SetString(PyExc_ValueError, "dropout_forward: n >= 0, 0 <= g0 <= g1 <= ceil(n / 32), 1 <= threshold <= 2^24, and an AVX2/FMA CPU");
        return NULL;
    }
    if (bias && !columns_ok("dropout_forward", n, cols)) return NULL;
#ifdef SYNTAXNMT_X86
    struct dropout_extra e = {(const float *)(uintptr_t)bias, cols, relu, (const float *)(uintptr_t)residual};
    Py_BEGIN_ALLOW_THREADS;
    dropout_groups((const float *)(uintptr_t)x, (float *)(uintptr_t)out, (uint8_t *)(uintptr_t)bits, n, threshold, (float)scale, (uint64_t)seed, g0, g1, &e);
    Py_END_ALLOW_THREADS;
#endif
    Py_RETURN_NONE;
}

static PyObject *dropout_backward(PyObject *self, PyObject *args) {
    unsigned long long grad, out, bits, colsum = 0;
    long long n, g0, g1, cols = 0;
    double scale;
    if (!PyArg_ParseTuple(args, "KKKLdLL|KL", &grad, &out, &bits, &n, &scale, &g0, &g1, &colsum, &cols)) return NULL;
    if (n < 0 || g0 < 0 || g1 < g0 || g1 * 32 > n + 31 || !use_avx2) {
        PyErr_SetString(PyExc_ValueError, "dropout_backward: n >= 0, 0 <= g0 <= g1 <= ceil(n / 32), and an AVX2/FMA CPU");
        return NULL;
    }
    if (colsum && !columns_ok("dropout_backward", n, cols)) return NULL;
#ifdef SYNTAXNMT_X86
    Py_BEGIN_ALLOW_THREADS;
    dropout_back_groups((const float *)(uintptr_t)grad, (float *)(uintptr_t)out, (const uint8_t *)(uintptr_t)bits, n, (float)scale, g0, g1, (double *)(uintptr_t)colsum, cols);
    Py_END_ALLOW_THREADS;
#endif
    Py_RETURN_NONE;
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
    {"attention_forward", attention_forward, METH_VARARGS, "whole-sequence attention of sentences b0..b1, keeping the probabilities (see the module source)"},
    {"attention_backward", attention_backward, METH_VARARGS, "the gradients of attention_forward's queries, keys and values (see the module source)"},
    {"smoothed_xent", smoothed_xent, METH_VARARGS, "label-smoothed cross-entropy of each row and its gradient in place of the logits (see the module source)"},
    {"dropout_forward", dropout_forward, METH_VARARGS, "dropout of groups g0..g1 of 32 elements, Philox4x32-10 words, the mask kept as bits (see the module source)"},
    {"dropout_backward", dropout_backward, METH_VARARGS, "the gradient of dropout_forward through its bits (see the module source)"},
    {"vectorized", vectorized, METH_NOARGS, "True when the AVX2/FMA path runs (else the scalar one)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "Native CPU kernels of beam search (see syntaxnmt.decoding.native).", -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    use_avx2 = cpu_has_avx2();
    return PyModule_Create(&module);
}
