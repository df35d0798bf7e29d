/* Native CPU kernels: beam search's single-query attention; training's attention of short sequences, dropout (fused with a bias, ReLU or residual) and label-smoothed loss.
 *
 * An optional C extension (pyproject.toml builds it at pip install; without a C compiler the
 * install goes on and syntaxnmt.cpu.machine.native_kernels() is None, so decoding and training
 * keep PyTorch's operators). Each kernel replaces a chain of PyTorch operators and their copies at
 * the shapes of beam search (docs/deployment.md, "The native search step") or of training
 * (docs/benchmarks.md, "Native kernels of training") on the CPU:
 *
 * self_attention and cross_attention (below): one query per row and head, reading keys and values
 * where they are instead of copies of the caches. Used by syntaxnmt.cpu.attention.
 *
 * attention_forward and attention_backward (below): whole-sequence attention of training and
 * scoring, per sentence and head, with its gradients. Used by syntaxnmt.cpu.attention.
 *
 * smoothed_xent (below): the label-smoothed cross-entropy of a chunk of logits and its gradient
 * in place. Used by syntaxnmt.training.losses.
 *
 * dropout_forward and dropout_backward (below): dropout with a counter-based generator, its mask
 * kept as bits, alone or fused with a bias, a ReLU and a residual; add_norm_forward and
 * add_norm_backward: a residual's dropout and the next layer norm in one pass. Used by syntaxnmt.cpu.dropout.
 *
 * Every function releases the GIL. The kernels of training take a last, optional argument
 * threads (default 1) and split their range between torch's OpenMP threads
 * (below, "Threads"); sums over the range are made in fixed chunks, so a result does not depend
 * on the threads. The fast
 * paths need AVX2 and FMA (checked at import: vectorized(); syntaxnmt.cpu.machine.native_kernels() is
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
#ifdef _OPENMP
#include <omp.h>
#endif

static int use_avx2 = 0; /* set at import: the CPU has AVX2 and FMA */

/* ---- Threads: a kernel's range split between torch's OpenMP threads --------------------------
 * A Python thread pool cost a kernel call 100-250 microseconds on a 2-core KVM guest (the GIL
 * handed between threads, each hand-over a wake-up of an idle virtual CPU), and a pool of the
 * kernels' own threads still woke an idle thread per call, which a spinning OpenMP thread of the
 * products held off (docs/benchmarks.md, "Fused residual norms, packed embeddings and the
 * kernels' threads"). So the kernels run in
 * an OpenMP parallel region: the module is built with -fopenmp and loaded after torch, so its
 * libgomp.so.1 is torch's (tests/test_native_threads.py checks that it loads no other), and a kernel
 * that follows a product finds the same threads still spinning. The caller gives threads (torch's
 * intra-op count); the range is cut in contiguous blocks, the first to thread 0 (schedule
 * static, as torch's own operators split rows: the next product finds the rows a thread wrote in
 * that thread's cache; chunks claimed dynamically interleaved them and the following products
 * ran slower in paired profiles). Sums over the range are made per chunk of a fixed size and
 * added in chunk order, so a result does not depend on the threads. Without OpenMP at build time a
 * kernel computes in the calling thread. As torch's own operators, a kernel with threads > 1 in a
 * child forked after the parent ran a parallel region waits forever (libgomp is not fork-safe):
 * set torch's threads to 1 there, as torch's DataLoader workers do. */
#define MAX_THREADS 64
typedef void (*part_fn)(void *ctx, int64_t a, int64_t b, int slot); /* items a..b of the range, on per-thread buffers `slot` */

/* fn over items 0..n-1 in threads threads (at most MAX_THREADS; slots 0..threads-1), in chunks
 * of `chunk` items (0: one a thread), each thread a contiguous run of chunks. A kernel that sums
 * over its range gives a fixed chunk and keeps one partial sum per chunk (item a belongs to chunk
 * a / chunk), added in chunk order: the same sum whatever the threads. */
static void run_parts(part_fn fn, void *ctx, int64_t n, int threads, int64_t chunk) {
    if (n <= 0) return;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > n) threads = (int)n;
#ifndef _OPENMP
    threads = 1;
#endif
    if (chunk <= 0) chunk = (n + threads - 1) / threads; /* one a thread */
    int64_t chunks = (n + chunk - 1) / chunk;
    if (threads <= 1) {
        for (int64_t c = 0; c < chunks; c++) fn(ctx, c * chunk, (c + 1) * chunk < n ? (c + 1) * chunk : n, 0);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
    {
        int slot = omp_get_thread_num();
#pragma omp for schedule(static) nowait
        for (int64_t c = 0; c < chunks; c++) fn(ctx, c * chunk, (c + 1) * chunk < n ? (c + 1) * chunk : n, slot);
    }
#endif
}

/* threads clamped to 1..MAX_THREADS: the number of per-thread buffers a call allocates */
static int slots_of(int threads) { return threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads; }

/* total[c] += parts[i * cols + c] for i = 0, 1, ..., count - 1, in that order */
static void add_parts(double *total, const double *parts, int64_t count, int64_t cols) {
    for (int64_t i = 0; i < count; i++)
        for (int64_t c = 0; c < cols; c++) total[c] += parts[i * cols + c];
}

/* ---- Vector helpers and the CPU check -------------------------------------------------------
 * An 8-wide exp and sum for the softmaxes of the kernels below, and whether this CPU has AVX2 and
 * FMA (use_avx2, set at import). */
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

static int cpu_has_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
static int cpu_has_avx2(void) { return 0; }
#endif

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
 * syntaxnmt.cpu.attention. Tensors are (B, H, L, d) views given by their address and
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
/* The 8 x 8 floats of r transposed in place (row t becomes column t). */
__attribute__((target("avx2,fma"))) static inline void transpose8(__m256 r[8]) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)), u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)), u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20), r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20), r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31), r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31), r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* Kt (d x L8) = the transpose of the L rows of K (d floats each, one after another), zeros in the
 * columns L..L8-1 (L8: L rounded up to 8), through 8 x 8 tiles in registers. */
__attribute__((target("avx2,fma"))) static void transpose_rows(const float *K, int64_t L, int64_t d, float *Kt, int64_t L8) {
    for (int64_t j = 0; j < L8; j += 8)
        for (int64_t c = 0; c < d; c += 8) {
            __m256 r[8];
            for (int t = 0; t < 8; t++) r[t] = j + t < L ? _mm256_loadu_ps(K + (j + t) * d + c) : _mm256_setzero_ps();
            transpose8(r);
            for (int t = 0; t < 8; t++) _mm256_storeu_ps(Kt + (c + t) * L8 + j, r[t]);
        }
}

/* S[i][j] = scale * (A_i . B_j) for the na rows A_i of A (d floats each, one after another) and
 * the columns j of Bt (d x L8, B transposed): all L8 columns, or with causal the columns up to row
 * i's own rounded up to 8 (the rest of a row is left as it was). Tiles of 4 rows x 16 columns
 * accumulate in 8 registers: per element of d, 2 loads of Bt and 4 broadcasts of A feed 8 FMAs,
 * and no horizontal sums. S rows are L8 floats apart. */
__attribute__((target("avx2,fma"))) static void scores_tile(const float *A, int64_t na, const float *Bt, int64_t L8, int64_t d, float scale, int causal, float *S) {
    __m256 sc = _mm256_set1_ps(scale);
    for (int64_t i = 0; i < na; i += 4) {
        int64_t rows = na - i < 4 ? na - i : 4, nj = L8;
        if (causal && (i + rows + 7) / 8 * 8 < L8) nj = (i + rows + 7) / 8 * 8;
        const float *a0 = A + i * d, *a1 = A + (i + (rows > 1)) * d, *a2 = A + (i + (rows > 2) * 2) * d, *a3 = A + (i + (rows > 3) * 3) * d;
        int64_t j = 0;
        for (; j + 16 <= nj; j += 16) {
            __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
            for (int64_t c = 0; c < d; c++) {
                const float *bt = Bt + c * L8 + j;
                __m256 b0 = _mm256_loadu_ps(bt), b1 = _mm256_loadu_ps(bt + 8), x;
                x = _mm256_broadcast_ss(a0 + c), c00 = _mm256_fmadd_ps(x, b0, c00), c01 = _mm256_fmadd_ps(x, b1, c01);
                x = _mm256_broadcast_ss(a1 + c), c10 = _mm256_fmadd_ps(x, b0, c10), c11 = _mm256_fmadd_ps(x, b1, c11);
                x = _mm256_broadcast_ss(a2 + c), c20 = _mm256_fmadd_ps(x, b0, c20), c21 = _mm256_fmadd_ps(x, b1, c21);
                x = _mm256_broadcast_ss(a3 + c), c30 = _mm256_fmadd_ps(x, b0, c30), c31 = _mm256_fmadd_ps(x, b1, c31);
            }
            float *s = S + i * L8 + j;
            __m256 out[8] = {c00, c01, c10, c11, c20, c21, c30, c31};
            for (int64_t r = 0; r < rows; r++) {
                _mm256_storeu_ps(s + r * L8, _mm256_mul_ps(out[2 * r], sc));
                _mm256_storeu_ps(s + r * L8 + 8, _mm256_mul_ps(out[2 * r + 1], sc));
            }
        }
        if (j < nj) { /* the last 8 columns */
            __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
            for (int64_t c = 0; c < d; c++) {
                __m256 b0 = _mm256_loadu_ps(Bt + c * L8 + j);
                c0 = _mm256_fmadd_ps(_mm256_broadcast_ss(a0 + c), b0, c0);
                c1 = _mm256_fmadd_ps(_mm256_broadcast_ss(a1 + c), b0, c1);
                c2 = _mm256_fmadd_ps(_mm256_broadcast_ss(a2 + c), b0, c2);
                c3 = _mm256_fmadd_ps(_mm256_broadcast_ss(a3 + c), b0, c3);
            }
            __m256 out[4] = {c0, c1, c2, c3};
            for (int64_t r = 0; r < rows; r++) _mm256_storeu_ps(S + (i + r) * L8 + j, _mm256_mul_ps(out[r], sc));
        }
    }
}

/* Y_o = sum_k W[o * wo + k * wk] X_k for the n_out rows Y_o of Y (d floats each, one after
 * another; overwritten) over the rows X_k of X, k < nk, or with causal only the k that can have
 * a nonzero weight for a pair of rows (o, o + 1): k <= o + 1 (mode 1: P V, dS K) or k >= o
 * (mode 2: the transposed weights of dS^T Q, P^T dO). Pairs of rows x 32 columns accumulate in 8
 * registers: per k, 4 loads of X and 2 broadcasts feed 8 FMAs. */
__attribute__((target("avx2,fma"))) static void combine_rows(const float *W, int64_t wo, int64_t wk, const float *X, int64_t nk, int64_t n_out, int64_t d, int mode, float *Y) {
    for (int64_t o = 0; o < n_out; o += 2) {
        int two = o + 1 < n_out;
        int64_t lo = mode == 2 ? o : 0, hi = mode == 1 && o + 2 < nk ? o + 2 : nk;
        const float *w0 = W + o * wo, *w1 = two ? w0 + wo : w0;
        float *y0 = Y + o * d, *y1 = y0 + d;
        int64_t c = 0;
        for (; c + 32 <= d; c += 32) {
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
            for (int64_t k = lo; k < hi; k++) {
                const float *x = X + k * d + c;
                __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8), x2 = _mm256_loadu_ps(x + 16), x3 = _mm256_loadu_ps(x + 24);
                __m256 p = _mm256_broadcast_ss(w0 + k * wk), q = _mm256_broadcast_ss(w1 + k * wk);
                a0 = _mm256_fmadd_ps(p, x0, a0), a1 = _mm256_fmadd_ps(p, x1, a1), a2 = _mm256_fmadd_ps(p, x2, a2), a3 = _mm256_fmadd_ps(p, x3, a3);
                b0 = _mm256_fmadd_ps(q, x0, b0), b1 = _mm256_fmadd_ps(q, x1, b1), b2 = _mm256_fmadd_ps(q, x2, b2), b3 = _mm256_fmadd_ps(q, x3, b3);
            }
            _mm256_storeu_ps(y0 + c, a0), _mm256_storeu_ps(y0 + c + 8, a1), _mm256_storeu_ps(y0 + c + 16, a2), _mm256_storeu_ps(y0 + c + 24, a3);
            if (two) _mm256_storeu_ps(y1 + c, b0), _mm256_storeu_ps(y1 + c + 8, b1), _mm256_storeu_ps(y1 + c + 16, b2), _mm256_storeu_ps(y1 + c + 24, b3);
        }
        for (; c < d; c += 8) {
            __m256 a = _mm256_setzero_ps(), b = a;
            for (int64_t k = lo; k < hi; k++) {
                __m256 x = _mm256_loadu_ps(X + k * d + c);
                a = _mm256_fmadd_ps(_mm256_broadcast_ss(w0 + k * wk), x, a);
                b = _mm256_fmadd_ps(_mm256_broadcast_ss(w1 + k * wk), x, b);
            }
            _mm256_storeu_ps(y0 + c, a);
            if (two) _mm256_storeu_ps(y1 + c, b);
        }
    }
}

/* One row of probabilities in place: s (L8 scaled scores) becomes the softmax over the keys
 * j < n that are not dead (dead: L8 lane masks, all ones at a padded key or a column >= Lk) and
 * zeros elsewhere; a row with no key left becomes zeros. A NaN or +inf score among its keys
 * (diverged weights) makes its first n entries NaN, as in PyTorch's kernels: training must see it. */
__attribute__((target("avx2,fma"))) static void softmax_lanes(float *s, int64_t n, int64_t L8, const int32_t *dead) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY), pinf = _mm256_set1_ps(INFINITY);
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 m = ninf, bad = _mm256_setzero_ps();
    for (int64_t j = 0; j < L8; j += 8) {
        __m256i beyond = _mm256_cmpgt_epi32(_mm256_add_epi32(iota, _mm256_set1_epi32((int)j)), _mm256_set1_epi32((int)n - 1));
        __m256 off = _mm256_or_ps(_mm256_loadu_ps((const float *)(dead + j)), _mm256_castsi256_ps(beyond));
        __m256 x = _mm256_blendv_ps(_mm256_loadu_ps(s + j), ninf, off);
        _mm256_storeu_ps(s + j, x);
        bad = _mm256_or_ps(bad, _mm256_or_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q), _mm256_cmp_ps(x, pinf, _CMP_EQ_OQ)));
        m = _mm256_max_ps(m, x);
    }
    if (_mm256_movemask_ps(bad)) {
        for (int64_t j = 0; j < L8; j++) s[j] = j < n ? NAN : 0.0f;
        return;
    }
    float t[8], mx = -INFINITY;
    _mm256_storeu_ps(t, m);
    for (int i = 0; i < 8; i++) mx = t[i] > mx ? t[i] : mx;
    if (mx == -INFINITY) {
        memset(s, 0, L8 * sizeof(float));
        return;
    }
    __m256 mm = _mm256_set1_ps(mx), sum = _mm256_setzero_ps();
    for (int64_t j = 0; j < L8; j += 8) {
        __m256 x = _mm256_loadu_ps(s + j);
        __m256 e = _mm256_andnot_ps(_mm256_cmp_ps(x, ninf, _CMP_EQ_OQ), exp8(_mm256_sub_ps(x, mm))); /* exp8 stops at e^-87, not 0 */
        _mm256_storeu_ps(s + j, e);
        sum = _mm256_add_ps(sum, e);
    }
    __m256 inv = _mm256_set1_ps(1.0f / hsum8(sum));
    for (int64_t j = 0; j < L8; j += 8) _mm256_storeu_ps(s + j, _mm256_mul_ps(_mm256_loadu_ps(s + j), inv));
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

static inline int64_t round8(int64_t n) { return (n + 7) / 8 * 8; }

/* The floats of forward_block's work: Q, O (Lq d), K, V (Lk d), Kt (d L8), S (Lq L8), dead (L8). */
static inline int64_t forward_work(int64_t Lq, int64_t Lk, int64_t d) { return (2 * Lq + 2 * Lk) * d + (d + Lq + 1) * round8(Lk); }

__attribute__((target("avx2,fma"))) static void forward_block(const struct view *q, const struct view *k, const struct view *v, const struct view *o, float *P, const uint8_t *pad, int64_t b, int64_t h, int64_t Lq, int64_t Lk, int64_t d, int causal, float scale, float *work) {
    int64_t L8 = round8(Lk);
    float *Q = work, *O = Q + Lq * d, *K = O + Lq * d, *V = K + Lk * d, *Kt = V + Lk * d, *S = Kt + d * L8;
    int32_t *dead = (int32_t *)(S + Lq * L8);
    pack(q, b, h, Lq, d, Q, 0);
    pack(k, b, h, Lk, d, K, 0);
    pack(v, b, h, Lk, d, V, 0);
    transpose_rows(K, Lk, d, Kt, L8);
    for (int64_t j = 0; j < L8; j++) dead[j] = j >= Lk || (pad && pad[j]) ? -1 : 0;
    scores_tile(Q, Lq, Kt, L8, d, scale, causal, S);
    for (int64_t i = 0; i < Lq; i++) {
        softmax_lanes(S + i * L8, causal && i + 1 < Lk ? i + 1 : Lk, L8, dead);
        memcpy(P + i * Lk, S + i * L8, Lk * sizeof(float));
    }
    combine_rows(S, L8, 1, V, Lk, Lq, d, causal, O);
    pack(o, b, h, Lq, d, O, 1);
}

/* The floats of backward_block's work: Q, G, dQ (Lq d), K, V, dK, dV (Lk d), Vt (d L8), P, dS (Lq L8). */
static inline int64_t backward_work(int64_t Lq, int64_t Lk, int64_t d) { return (3 * Lq + 4 * Lk) * d + (d + 2 * Lq) * round8(Lk); }

__attribute__((target("avx2,fma"))) static void backward_block(const struct view *q, const struct view *k, const struct view *v, const struct view *dout, const struct view *dq, const struct view *dk, const struct view *dv, const float *P, int64_t b, int64_t h, int64_t Lq, int64_t Lk, int64_t d, int causal, float scale, float *work) {
    int64_t L8 = round8(Lk);
    float *Q = work, *G = Q + Lq * d, *dQ = G + Lq * d, *K = dQ + Lq * d, *V = K + Lk * d, *dK = V + Lk * d, *dV = dK + Lk * d, *Vt = dV + Lk * d, *Pb = Vt + d * L8, *dS = Pb + Lq * L8;
    pack(q, b, h, Lq, d, Q, 0);
    pack(dout, b, h, Lq, d, G, 0);
    pack(k, b, h, Lk, d, K, 0);
    pack(v, b, h, Lk, d, V, 0);
    transpose_rows(V, Lk, d, Vt, L8);
    for (int64_t i = 0; i < Lq; i++) {
        memcpy(Pb + i * L8, P + i * Lk, Lk * sizeof(float));
        for (int64_t j = Lk; j < L8; j++) Pb[i * L8 + j] = 0.0f;
    }
    memset(dS, 0, Lq * L8 * sizeof(float)); /* causal: the columns scores_tile leaves out */
    scores_tile(G, Lq, Vt, L8, d, 1.0f, causal, dS); /* dP = dO V^T */
    __m256 sc = _mm256_set1_ps(scale);
    for (int64_t i = 0; i < Lq; i++) { /* dS = P o (dP - rowsum(P o dP)), times scale */
        float *p = Pb + i * L8, *s = dS + i * L8;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t j = 0; j < L8; j += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(p + j), _mm256_loadu_ps(s + j), acc);
        __m256 D = _mm256_set1_ps(hsum8(acc));
        for (int64_t j = 0; j < L8; j += 8) _mm256_storeu_ps(s + j, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(p + j), _mm256_sub_ps(_mm256_loadu_ps(s + j), D)), sc));
    }
    combine_rows(dS, L8, 1, K, Lk, Lq, d, causal, dQ);           /* dQ = dS K */
    combine_rows(dS, 1, L8, Q, Lq, Lk, d, causal ? 2 : 0, dK);   /* dK = dS^T Q */
    combine_rows(Pb, 1, L8, G, Lq, Lk, d, causal ? 2 : 0, dV);   /* dV = P^T dO */
    pack(dq, b, h, Lq, d, dQ, 1);
    pack(dk, b, h, Lk, d, dK, 1);
    pack(dv, b, h, Lk, d, dV, 1);
}
#endif

/* attention_forward(q, k, v, out, P, pad, b0, b1, H, Lq, Lk, d, causal, scale): q, k, v, out are
 * views (parse_view: strided, or packed rows with a row map); P: float32 (B, H, Lq, Lk) contiguous, written; pad: 0 or a uint8
 * (B, Lk) mask (nonzero at padding). Sentences b0 <= b < b1. */
#ifdef SYNTAXNMT_X86
struct attention_job {
    struct view *q, *k, *v, *o, *dout, *dq, *dk, *dv;
    float *probs, *work; /* work: per slot per_slot floats */
    const uint8_t *mask;
    int64_t b0, H, Lq, Lk, d, per_slot;
    int causal;
    float scale;
};

/* Each thread's absent rows: its own write row, so that no two threads write one row. */
static void attention_forward_part(void *ctx, int64_t a, int64_t z, int slot) {
    struct attention_job *j = ctx;
    float *work = j->work + slot * j->per_slot;
    struct view o = *j->o;
    o.absent = work + j->per_slot - j->d; /* this thread's row for dropped writes */
    for (int64_t b = j->b0 + a; b < j->b0 + z; b++)
        for (int64_t h = 0; h < j->H; h++) {
            const struct view *ahead[] = {j->k, j->v};
            const int64_t lengths[] = {j->Lk, j->Lk};
            prefetch_next(ahead, lengths, 2, b, h, j->b0 + z, j->H, j->d);
            forward_block(j->q, j->k, j->v, &o, j->probs + (b * j->H + h) * j->Lq * j->Lk, j->mask ? j->mask + b * j->Lk : NULL, b, h, j->Lq, j->Lk, j->d, j->causal, j->scale, work);
        }
}

static void attention_backward_part(void *ctx, int64_t a, int64_t z, int slot) {
    struct attention_job *j = ctx;
    float *work = j->work + slot * j->per_slot;
    struct view dq = *j->dq, dk = *j->dk, dv = *j->dv;
    dq.absent = dk.absent = dv.absent = work + j->per_slot - j->d;
    for (int64_t b = j->b0 + a; b < j->b0 + z; b++)
        for (int64_t h = 0; h < j->H; h++) {
            const struct view *ahead[] = {j->q, j->dout, &dq, j->k, j->v, &dk, &dv};
            const int64_t lengths[] = {j->Lq, j->Lq, j->Lq, j->Lk, j->Lk, j->Lk, j->Lk};
            prefetch_next(ahead, lengths, 7, b, h, j->b0 + z, j->H, j->d);
            backward_block(j->q, j->k, j->v, j->dout, &dq, &dk, &dv, j->probs + (b * j->H + h) * j->Lq * j->Lk, b, h, j->Lq, j->Lk, j->d, j->causal, j->scale, work);
        }
}
#endif

static PyObject *attention_forward(PyObject *self, PyObject *args) {
    struct view q, k, v, o;
    unsigned long long P, pad;
    long long b0, b1, H, Lq, Lk, d;
    int causal, threads = 1;
    double scale;
    if (!PyArg_ParseTuple(args, "O&O&O&O&KKLLLLLLpd|i", parse_view, &q, parse_view, &k, parse_view, &v, parse_view, &o, &P, &pad, &b0, &b1, &H, &Lq, &Lk, &d, &causal, &scale, &threads)) return NULL;
    if (!blocks_ok("attention_forward", b0, b1, H, Lq, Lk, d)) return NULL;
#ifdef SYNTAXNMT_X86
    int slots = slots_of(threads);
    int64_t per_slot = forward_work(Lq, Lk, d) + d; /* a block's work, then the row of dropped writes */
    float *work = malloc(slots * per_slot * sizeof(float)), *absent = calloc(d, sizeof(float));
    if (!work || !absent) {
        free(work), free(absent);
        return PyErr_NoMemory();
    }
    struct view *reads[] = {&q, &k, &v};
    set_absent(reads, 3, absent); /* zeros, read by every thread */
    struct attention_job j = {.q = &q, .k = &k, .v = &v, .o = &o, .probs = (float *)(uintptr_t)P, .work = work, .mask = (const uint8_t *)(uintptr_t)pad,
                              .b0 = b0, .H = H, .Lq = Lq, .Lk = Lk, .d = d, .per_slot = per_slot, .causal = causal, .scale = (float)scale};
    Py_BEGIN_ALLOW_THREADS;
    run_parts(attention_forward_part, &j, b1 - b0, slots, 0);
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
    int causal, threads = 1;
    double scale;
    if (!PyArg_ParseTuple(args, "O&O&O&O&O&O&O&KLLLLLLpd|i", parse_view, &q, parse_view, &k, parse_view, &v, parse_view, &dout, parse_view, &dq, parse_view, &dk, parse_view, &dv, &P, &b0, &b1, &H, &Lq, &Lk, &d, &causal, &scale, &threads)) return NULL;
    if (!blocks_ok("attention_backward", b0, b1, H, Lq, Lk, d)) return NULL;
#ifdef SYNTAXNMT_X86
    int slots = slots_of(threads);
    int64_t per_slot = backward_work(Lq, Lk, d) + d; /* a block's work, then the row of dropped writes */
    float *work = malloc(slots * per_slot * sizeof(float)), *absent = calloc(d, sizeof(float));
    if (!work || !absent) {
        free(work), free(absent);
        return PyErr_NoMemory();
    }
    struct view *reads[] = {&q, &k, &v, &dout};
    set_absent(reads, 4, absent); /* zeros, read by every thread */
    struct attention_job j = {.q = &q, .k = &k, .v = &v, .dout = &dout, .dq = &dq, .dk = &dk, .dv = &dv, .probs = (float *)(uintptr_t)P, .work = work,
                              .b0 = b0, .H = H, .Lq = Lq, .Lk = Lk, .d = d, .per_slot = per_slot, .causal = causal, .scale = (float)scale};
    Py_BEGIN_ALLOW_THREADS;
    run_parts(attention_backward_part, &j, b1 - b0, slots, 0);
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

#ifdef SYNTAXNMT_X86
struct xent_job {
    float *z, *loss, *nll;
    const int64_t *ys;
    int64_t V;
    float eps;
};

static void xent_part(void *ctx, int64_t a, int64_t b, int slot) {
    struct xent_job *j = ctx;
    for (int64_t r = a; r < b; r++) xent_row(j->z + r * j->V, j->V, j->ys[r], j->eps, j->loss + r, j->nll + r);
}
#endif

static PyObject *smoothed_xent(PyObject *self, PyObject *args) {
    unsigned long long z, target, loss, nll;
    long long rows, V;
    double eps;
    int threads = 1;
    if (!PyArg_ParseTuple(args, "KLLKdKK|i", &z, &rows, &V, &target, &eps, &loss, &nll, &threads)) return NULL;
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
    struct xent_job j = {(float *)(uintptr_t)z, (float *)(uintptr_t)loss, (float *)(uintptr_t)nll, ys, V, (float)eps};
    Py_BEGIN_ALLOW_THREADS;
    run_parts(xent_part, &j, rows, threads, 0);
    Py_END_ALLOW_THREADS;
#endif
    Py_RETURN_NONE;
}

/* ---- Dropout of training: the mask drawn, applied and kept as bits in one pass ---------------
 * dropout_forward(x, out, bits, n, threshold, scale, seed, g0, g1): element i of x (float32) is
 * kept when its 16-bit random number u_i is >= threshold (ceil(p 2^16): kept with probability
 * 1 - p to within 2^-16, Srivastava et al. 2014) and scaled by 1 / (1 - p); out gets the result
 * and bit i of bits (uint8, 8 bytes per group) whether it was kept. Numbers come from
 * Philox4x32-10 (Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2, 3"), a
 * counter-based generator: the low and high halves of word w of counter 8g + l (key: the 64-bit
 * seed) are elements 64g + 16w + l and 64g + 16w + 8 + l, so each group g of 64 elements depends
 * on the seed and g alone, whatever the threads' split (groups g0 <= g < g1). Two elements per
 * 32-bit word halve the generator's work, most of the kernel's time (FlashAttention's dropout
 * compares 8-bit numbers; 16 bits keep the keep-probability within 1.6e-5 of 1 - p).
 * dropout_backward(grad, out, bits, n, scale, g0, g1): out = grad scaled where kept, 0 elsewhere.
 * Fused forms, for the blocks of a Transformer layer (optional trailing arguments): the forward's
 * bias, cols, relu, residual give out = residual + dropout(relu(x + bias)) -- the ReLU's zeros
 * clear their bits too, so the bits alone give the gradient of x -- and the backward's colsum, cols
 * add the column sums of out (the bias's gradient) to a float64 array in the same pass.
 * Used by syntaxnmt.cpu.dropout. */
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
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), below = _mm256_set1_epi32(threshold - 1), low = _mm256_set1_epi32(0xFFFF);
    const __m256 sc = _mm256_set1_ps(scale), zero = _mm256_setzero_ps();
    int64_t col = e->bias ? g0 * 64 % e->cols : 0; /* the bias's column of element i, kept without a division per vector */
    for (int64_t g = g0; g < g1; g++) {
        uint64_t counter = (uint64_t)g * 8;
        __m256i w[4];
        philox8(_mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)counter), lane), _mm256_set1_epi32((int)(uint32_t)(counter >> 32)), (uint32_t)seed, (uint32_t)(seed >> 32), w);
        for (int k = 0; k < 8; k++) {
            int64_t i = g * 64 + k * 8;
            __m256i u = k & 1 ? _mm256_srli_epi32(w[k >> 1], 16) : _mm256_and_si256(w[k >> 1], low);
            __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(u, below));
            if (i + 8 <= n) {
                __m256 v = _mm256_loadu_ps(x + i);
                if (e->bias) {
                    v = _mm256_add_ps(v, _mm256_loadu_ps(e->bias + col));
                    if ((col += 8) == e->cols) col = 0;
                }
                if (e->relu) keep = _mm256_and_ps(keep, _mm256_cmp_ps(v, zero, _CMP_GT_OQ));
                v = _mm256_mul_ps(v, _mm256_and_ps(sc, keep)); /* v * 0 keeps a NaN, as x * mask does */
                if (e->residual) v = _mm256_add_ps(_mm256_loadu_ps(e->residual + i), v);
                _mm256_storeu_ps(out + i, v);
                bits[g * 8 + k] = (uint8_t)_mm256_movemask_ps(keep);
            } else { /* the tail: no bias here (n is a multiple of cols, cols of 8) */
                int m = _mm256_movemask_ps(keep);
                for (int64_t j = i; j < n; j++) {
                    float v = x[j];
                    if (e->relu && !(v > 0.0f)) m &= ~(1 << (j - i));
                    v *= (m >> (j - i)) & 1 ? scale : 0.0f;
                    out[j] = e->residual ? e->residual[j] + v : v;
                }
                bits[g * 8 + k] = (uint8_t)m;
            }
        }
    }
}

/* colsum += fsum (cols floats, then zeroed). */
__attribute__((target("avx2,fma"))) static void flush_sums(double *colsum, float *fsum, int64_t cols) {
    for (int64_t c = 0; c < cols; c += 4) _mm256_storeu_pd(colsum + c, _mm256_add_pd(_mm256_loadu_pd(colsum + c), _mm256_cvtps_pd(_mm_loadu_ps(fsum + c))));
    memset(fsum, 0, cols * sizeof(float));
}

/* colsum: NULL or (cols,) doubles, to which the column sums of out are added (a bias's gradient;
 * cols a multiple of 8 that divides n), through fsum (cols floats, zeroed): float sums of up to
 * 32 rows added to the doubles (one float add per element instead of two conversions and two
 * double adds). */
__attribute__((target("avx2,fma"))) static void dropout_back_groups(const float *grad, float *out, const uint8_t *bits, int64_t n, float scale, int64_t g0, int64_t g1, double *colsum, float *fsum, int64_t cols) {
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256 sc = _mm256_set1_ps(scale);
    int rows = 0;
    int64_t col = colsum ? g0 * 64 % cols : 0; /* the column of element i, kept without a division per vector */
    for (int64_t b = g0 * 8; b < g1 * 8; b++) {
        int64_t i = b * 8;
        if (i >= n) break;
        if (i + 8 <= n) {
            __m256i kept = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(bits[b]), bit), bit);
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(grad + i), _mm256_and_ps(sc, _mm256_castsi256_ps(kept)));
            _mm256_storeu_ps(out + i, v);
            if (colsum) {
                float *f = fsum + col;
                _mm256_storeu_ps(f, _mm256_add_ps(_mm256_loadu_ps(f), v));
                if ((col += 8) == cols && (col = 0, ++rows == 32)) flush_sums(colsum, fsum, cols), rows = 0;
            }
        } else
            for (int64_t j = i; j < n; j++) out[j] = grad[j] * ((bits[b] >> (j - i)) & 1 ? scale : 0.0f);
    }
    if (colsum) flush_sums(colsum, fsum, cols);
}

/* add_norm_forward(x, y, xo, h, bits, stats, gamma, beta, rows, cols, threshold, scale, seed, eps,
 * r0, r1): a pre-norm Transformer's residual connection and the next block's layer norm (Ba et al.
 * 2016) in one pass over rows r0..r1 of cols floats (cols a multiple of 64): xo = x + dropout(y),
 * the dropout of dropout_forward with the same seed (the same bits, groups of 64 elements, a row
 * its own groups), and h = gamma (xo - mean) / sqrt(var + eps) + beta with the row's mean and
 * (biased) variance; stats gets each row's mean and 1 / sqrt(var + eps). A row is in L1 between
 * the two, so the layer norm reads nothing from memory.
 * add_norm_backward(gxo, gh, xo, stats, gamma, bits, gx, gy, rows, cols, scale, r0, r1, ggamma,
 * gbeta): with xh = (xo - mean) rstd and gxh = gh gamma, the gradient of xo (the residual path's
 * gxo, or none: 0, plus the norm's rstd (gxh - mean(gxh) - xh mean(gxh xh))) goes to gx, which is
 * also x's gradient, and through the bits to gy, y's; ggamma and gbeta (float64, cols) get the
 * column sums of gh xh and gh added. Used by syntaxnmt.cpu.dropout (dropout_add_norm). */
__attribute__((target("avx2,fma"))) static void norm_row(const float *xo, float *h, float *stats, const float *gamma, const float *beta, int64_t cols, float eps) {
    __m256 s = _mm256_setzero_ps();
    for (int64_t c = 0; c < cols; c += 8) s = _mm256_add_ps(s, _mm256_loadu_ps(xo + c));
    float mean = hsum8(s) / (float)cols;
    __m256 m = _mm256_set1_ps(mean), q = _mm256_setzero_ps();
    for (int64_t c = 0; c < cols; c += 8) {
        __m256 d = _mm256_sub_ps(_mm256_loadu_ps(xo + c), m);
        q = _mm256_fmadd_ps(d, d, q);
    }
    float rstd = 1.0f / sqrtf(hsum8(q) / (float)cols + eps);
    __m256 r = _mm256_set1_ps(rstd);
    for (int64_t c = 0; c < cols; c += 8) {
        __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xo + c), m), r);
        _mm256_storeu_ps(h + c, _mm256_fmadd_ps(xh, _mm256_loadu_ps(gamma + c), _mm256_loadu_ps(beta + c)));
    }
    stats[0] = mean, stats[1] = rstd;
}

__attribute__((target("avx2,fma"))) static void add_norm_rows(const float *x, const float *y, float *xo, float *h, uint8_t *bits, float *stats, const float *gamma, const float *beta, int64_t rows, int64_t cols, int32_t threshold, float scale, uint64_t seed, float eps, int64_t r0, int64_t r1) {
    int64_t per = cols / 64, n = rows * cols;
    struct dropout_extra e = {NULL, cols, 0, x};
    for (int64_t r = r0; r < r1; r++) {
        dropout_groups(y, xo, bits, n, threshold, scale, seed, r * per, (r + 1) * per, &e);
        norm_row(xo + r * cols, h + r * cols, stats + 2 * r, gamma, beta, cols, eps);
    }
}

/* sum += the cols floats of v (8 at a time) */
__attribute__((target("avx2,fma"))) static inline void add_row(float *sum, const float *v, int64_t cols) {
    for (int64_t c = 0; c < cols; c += 8) _mm256_storeu_ps(sum + c, _mm256_add_ps(_mm256_loadu_ps(sum + c), _mm256_loadu_ps(v + c)));
}

__attribute__((target("avx2,fma"))) static void add_norm_back_rows(const float *gxo, const float *gh, const float *xo, const float *stats, const float *gamma, const uint8_t *bits, float *gx, float *gy, int64_t rows, int64_t cols, float scale, int64_t r0, int64_t r1, double *ggamma, double *gbeta, float *fsum) {
    int64_t per = cols / 64, n = rows * cols, pending = 0;
    float *fg = fsum, *fb = fsum + cols, *t = fsum + 2 * cols; /* float sums of gamma's and beta's gradients; t: gh xh of a row */
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = xo + r * cols, *g = gh + r * cols;
        __m256 m = _mm256_set1_ps(stats[2 * r]), rs = _mm256_set1_ps(stats[2 * r + 1]), a = _mm256_setzero_ps(), b = a;
        for (int64_t c = 0; c < cols; c += 8) {
            __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xr + c), m), rs), gv = _mm256_loadu_ps(g + c);
            __m256 gxh = _mm256_mul_ps(gv, _mm256_loadu_ps(gamma + c));
            a = _mm256_add_ps(a, gxh), b = _mm256_fmadd_ps(gxh, xh, b);
            _mm256_storeu_ps(t + c, _mm256_mul_ps(gv, xh));
        }
        add_row(fg, t, cols), add_row(fb, g, cols);
        __m256 ma = _mm256_set1_ps(hsum8(a) / (float)cols), mb = _mm256_set1_ps(hsum8(b) / (float)cols);
        float *o = gx + r * cols;
        for (int64_t c = 0; c < cols; c += 8) {
            __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xr + c), m), rs);
            __m256 gxh = _mm256_mul_ps(_mm256_loadu_ps(g + c), _mm256_loadu_ps(gamma + c));
            __m256 v = _mm256_mul_ps(rs, _mm256_sub_ps(_mm256_sub_ps(gxh, ma), _mm256_mul_ps(xh, mb)));
            if (gxo) v = _mm256_add_ps(v, _mm256_loadu_ps(gxo + r * cols + c));
            _mm256_storeu_ps(o + c, v);
        }
        dropout_back_groups(gx, gy, bits, n, scale, r * per, (r + 1) * per, NULL, NULL, cols);
        if (++pending == 32) flush_sums(ggamma, fg, cols), flush_sums(gbeta, fb, cols), pending = 0;
    }
    flush_sums(ggamma, fg, cols), flush_sums(gbeta, fb, cols);
}
#endif

static int columns_ok(const char *name, long long n, long long cols) {
    if (cols < 8 || cols % 8 || n % cols) {
        PyErr_Format(PyExc_ValueError, "%s: a bias or column sums need cols a multiple of 8 that divides n", name);
        return 0;
    }
    return 1;
}

#ifdef SYNTAXNMT_X86
struct dropout_job {
    const float *x;
    float *out;
    uint8_t *bits;
    int64_t n, g0;
    int32_t threshold;
    float scale;
    uint64_t seed;
    struct dropout_extra e;
};

static void dropout_part(void *ctx, int64_t a, int64_t b, int slot) {
    struct dropout_job *j = ctx;
    dropout_groups(j->x, j->out, j->bits, j->n, j->threshold, j->scale, j->seed, j->g0 + a, j->g0 + b, &j->e);
}
#endif

static PyObject *dropout_forward(PyObject *self, PyObject *args) {
    unsigned long long x, out, bits, seed, bias = 0, residual = 0;
    long long n, g0, g1, cols = 0;
    int threshold, relu = 0, threads = 1;
    double scale;
    if (!PyArg_ParseTuple(args, "KKKLidKLL|KLpKi", &x, &out, &bits, &n, &threshold, &scale, &seed, &g0, &g1, &bias, &cols, &relu, &residual, &threads)) return NULL;
    if (n < 0 || g0 < 0 || g1 < g0 || g1 * 64 > n + 63 || threshold < 1 || threshold > (1 << 16) || !use_avx2) {
        PyErr_SetString(PyExc_ValueError, "dropout_forward: n >= 0, 0 <= g0 <= g1 <= ceil(n / 64), 1 <= threshold <= 2^16, and an AVX2/FMA CPU");
        return NULL;
    }
    if (bias && !columns_ok("dropout_forward", n, cols)) return NULL;
#ifdef SYNTAXNMT_X86
    struct dropout_job j = {(const float *)(uintptr_t)x, (float *)(uintptr_t)out, (uint8_t *)(uintptr_t)bits, n, g0, threshold, (float)scale, (uint64_t)seed, {(const float *)(uintptr_t)bias, cols, relu, (const float *)(uintptr_t)residual}};
    Py_BEGIN_ALLOW_THREADS;
    run_parts(dropout_part, &j, g1 - g0, threads, 0);
    Py_END_ALLOW_THREADS;
#endif
    Py_RETURN_NONE;
}

#ifdef SYNTAXNMT_X86
struct dropout_back_job {
    const float *grad;
    float *out;
    const uint8_t *bits;
    int64_t n, g0, cols;
    float scale;
    double *sums; /* NULL, or per chunk cols doubles */
    float *fsum;  /* per slot cols floats */
};

#define SUM_CHUNK 512 /* groups of 64 elements in a chunk of a backward pass that sums columns */

static void dropout_back_part(void *ctx, int64_t a, int64_t b, int slot) {
    struct dropout_back_job *j = ctx;
    dropout_back_groups(j->grad, j->out, j->bits, j->n, j->scale, j->g0 + a, j->g0 + b, j->sums ? j->sums + a / SUM_CHUNK * j->cols : NULL, j->fsum ? j->fsum + slot * j->cols : NULL, j->cols);
}

#endif

static PyObject *dropout_backward(PyObject *self, PyObject *args) {
    unsigned long long grad, out, bits, colsum = 0;
    long long n, g0, g1, cols = 0;
    int threads = 1;
    double scale;
    if (!PyArg_ParseTuple(args, "KKKLdLL|KLi", &grad, &out, &bits, &n, &scale, &g0, &g1, &colsum, &cols, &threads)) return NULL;
    if (n < 0 || g0 < 0 || g1 < g0 || g1 * 64 > n + 63 || !use_avx2) {
        PyErr_SetString(PyExc_ValueError, "dropout_backward: n >= 0, 0 <= g0 <= g1 <= ceil(n / 64), and an AVX2/FMA CPU");
        return NULL;
    }
    if (colsum && !columns_ok("dropout_backward", n, cols)) return NULL;
#ifdef SYNTAXNMT_X86
    int slots = slots_of(threads);
    int64_t chunks = (g1 - g0 + SUM_CHUNK - 1) / SUM_CHUNK;
    float *fsum = colsum ? calloc(slots * cols, sizeof(float)) : NULL;
    double *sums = colsum ? calloc(chunks * cols, sizeof(double)) : NULL;
    if (colsum && (!fsum || !sums)) {
        free(fsum), free(sums);
        return PyErr_NoMemory();
    }
    struct dropout_back_job j = {(const float *)(uintptr_t)grad, (float *)(uintptr_t)out, (const uint8_t *)(uintptr_t)bits, n, g0, cols, (float)scale, sums, fsum};
    Py_BEGIN_ALLOW_THREADS;
    run_parts(dropout_back_part, &j, g1 - g0, slots, colsum ? SUM_CHUNK : 0);
    if (colsum) add_parts((double *)(uintptr_t)colsum, sums, chunks, cols);
    Py_END_ALLOW_THREADS;
    free(fsum), free(sums);
#endif
    Py_RETURN_NONE;
}

static int add_norm_ok(const char *name, long long rows, long long cols, long long r0, long long r1) {
    if (rows < 0 || cols < 64 || cols % 64 || r0 < 0 || r1 < r0 || r1 > rows || !use_avx2) {
        PyErr_Format(PyExc_ValueError, "%s: rows >= 0, cols a multiple of 64, 0 <= r0 <= r1 <= rows, and an AVX2/FMA CPU", name);
        return 0;
    }
    return 1;
}

#ifdef SYNTAXNMT_X86
struct add_norm_job {
    const float *x, *y, *gamma, *beta, *gxo, *gh, *xo_in;
    float *xo, *h, *stats, *gx, *gy, *fsum;
    uint8_t *bits;
    int64_t rows, cols, r0;
    int32_t threshold;
    float scale, eps;
    uint64_t seed;
    double *gsums; /* backward: gamma's partial sums, cols doubles per chunk of NORM_CHUNK rows, then beta's */
    int64_t chunks;
};

#define NORM_CHUNK 64 /* rows in a chunk of add_norm's backward pass (it sums columns) */

static void add_norm_part(void *ctx, int64_t a, int64_t b, int slot) {
    struct add_norm_job *j = ctx;
    add_norm_rows(j->x, j->y, j->xo, j->h, j->bits, j->stats, j->gamma, j->beta, j->rows, j->cols, j->threshold, j->scale, j->seed, j->eps, j->r0 + a, j->r0 + b);
}

static void add_norm_back_part(void *ctx, int64_t a, int64_t b, int slot) {
    struct add_norm_job *j = ctx;
    double *g = j->gsums + a / NORM_CHUNK * j->cols;
    add_norm_back_rows(j->gxo, j->gh, j->xo_in, j->stats, j->gamma, j->bits, j->gx, j->gy, j->rows, j->cols, j->scale, j->r0 + a, j->r0 + b, g, g + j->chunks * j->cols, j->fsum + 3 * slot * j->cols);
}
#endif

static PyObject *add_norm_forward(PyObject *self, PyObject *args) {
    unsigned long long x, y, xo, h, bits, stats, gamma, beta, seed;
    long long rows, cols, r0, r1;
    int threshold, threads = 1;
    double scale, eps;
    if (!PyArg_ParseTuple(args, "KKKKKKKKLLidKdLL|i", &x, &y, &xo, &h, &bits, &stats, &gamma, &beta, &rows, &cols, &threshold, &scale, &seed, &eps, &r0, &r1, &threads)) return NULL;
    if (!add_norm_ok("add_norm_forward", rows, cols, r0, r1)) return NULL;
    if (threshold < 1 || threshold > (1 << 16)) {
        PyErr_SetString(PyExc_ValueError, "add_norm_forward: 1 <= threshold <= 2^16");
        return NULL;
    }
#ifdef SYNTAXNMT_X86
    struct add_norm_job j = {.x = (const float *)(uintptr_t)x, .y = (const float *)(uintptr_t)y, .gamma = (const float *)(uintptr_t)gamma, .beta = (const float *)(uintptr_t)beta,
                             .xo = (float *)(uintptr_t)xo, .h = (float *)(uintptr_t)h, .stats = (float *)(uintptr_t)stats, .bits = (uint8_t *)(uintptr_t)bits,
                             .rows = rows, .cols = cols, .r0 = r0, .threshold = threshold, .scale = (float)scale, .eps = (float)eps, .seed = (uint64_t)seed};
    Py_BEGIN_ALLOW_THREADS;
    run_parts(add_norm_part, &j, r1 - r0, threads, 0);
    Py_END_ALLOW_THREADS;
#endif
    Py_RETURN_NONE;
}

static PyObject *add_norm_backward(PyObject *self, PyObject *args) {
    unsigned long long gxo, gh, xo, stats, gamma, bits, gx, gy, ggamma, gbeta;
    long long rows, cols, r0, r1;
    int threads = 1;
    double scale;
    if (!PyArg_ParseTuple(args, "KKKKKKKKLLdLLKK|i", &gxo, &gh, &xo, &stats, &gamma, &bits, &gx, &gy, &rows, &cols, &scale, &r0, &r1, &ggamma, &gbeta, &threads)) return NULL;
    if (!add_norm_ok("add_norm_backward", rows, cols, r0, r1)) return NULL;
#ifdef SYNTAXNMT_X86
    int slots = slots_of(threads);
    int64_t chunks = (r1 - r0 + NORM_CHUNK - 1) / NORM_CHUNK;
    float *fsum = calloc(3 * slots * cols, sizeof(float));
    double *gsums = calloc(2 * chunks * cols, sizeof(double));
    if (!fsum || !gsums) {
        free(fsum), free(gsums);
        return PyErr_NoMemory();
    }
    struct add_norm_job j = {.gxo = (const float *)(uintptr_t)gxo, .gh = (const float *)(uintptr_t)gh, .xo_in = (const float *)(uintptr_t)xo, .stats = (float *)(uintptr_t)stats,
                             .gamma = (const float *)(uintptr_t)gamma, .bits = (uint8_t *)(uintptr_t)bits, .gx = (float *)(uintptr_t)gx, .gy = (float *)(uintptr_t)gy,
                             .rows = rows, .cols = cols, .r0 = r0, .scale = (float)scale, .gsums = gsums, .chunks = chunks, .fsum = fsum};
    Py_BEGIN_ALLOW_THREADS;
    run_parts(add_norm_back_part, &j, r1 - r0, slots, NORM_CHUNK);
    add_parts((double *)(uintptr_t)ggamma, gsums, chunks, cols);
    add_parts((double *)(uintptr_t)gbeta, gsums + chunks * cols, chunks, cols);
    Py_END_ALLOW_THREADS;
    free(fsum), free(gsums);
#endif
    Py_RETURN_NONE;
}

static PyObject *vectorized(PyObject *self, PyObject *args) { return PyBool_FromLong(use_avx2); }

static PyMethodDef methods[] = {
    {"self_attention", self_attention, METH_VARARGS, "single-query self-attention over the key/value blocks of the steps, through the ancestry table (see the module source)"},
    {"cross_attention", cross_attention, METH_VARARGS, "single-query attention over one key/value block per sentence (see the module source)"},
    {"attention_forward", attention_forward, METH_VARARGS, "whole-sequence attention of sentences b0..b1, keeping the probabilities (see the module source)"},
    {"attention_backward", attention_backward, METH_VARARGS, "the gradients of attention_forward's queries, keys and values (see the module source)"},
    {"smoothed_xent", smoothed_xent, METH_VARARGS, "label-smoothed cross-entropy of each row and its gradient in place of the logits (see the module source)"},
    {"dropout_forward", dropout_forward, METH_VARARGS, "dropout of groups g0..g1 of 64 elements, Philox4x32-10 words, the mask kept as bits (see the module source)"},
    {"dropout_backward", dropout_backward, METH_VARARGS, "the gradient of dropout_forward through its bits (see the module source)"},
    {"add_norm_forward", add_norm_forward, METH_VARARGS, "x + dropout(y) and its layer norm, rows r0..r1 in one pass (see the module source)"},
    {"add_norm_backward", add_norm_backward, METH_VARARGS, "the gradients of add_norm_forward's x, y, gamma and beta (see the module source)"},
    {"vectorized", vectorized, METH_NOARGS, "True when the AVX2/FMA path runs (else the scalar one)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "Native CPU kernels of beam search and training (see syntaxnmt.cpu).", -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    use_avx2 = cpu_has_avx2();
    return PyModule_Create(&module);
}
