/* gemm.c - the simulator's one dense matrix product, sim_gemm (simint.h):
 * MatMul/BatchMatMul, Dense and GroupedMatmul (kernels.c) all call it.
 *
 * The contract of kernels.c holds here too: operands are float32, every
 * dot product is accumulated in double and rounded once to float32 on
 * store.  A product of two floats is exact in double, so the result is the
 * double sum of exact terms; only the order of the additions depends on
 * the kernel, a difference far below float32's rounding.
 *
 * With a CBLAS (configure found OpenBLAS or another cblas: HAVE_CBLAS) the
 * operands are widened to double block by block and multiplied by
 * cblas_dgemm; transposed operands stay as stored and are passed with
 * CblasTrans.  Blocks of at most GEMM_BUDGET elements bound the double
 * copies of A, of B and of C (8 MB each; a block keeps at least 64 rows
 * when k passes 16384) whatever the matrix size: that memory is outside
 * --simulate-max-mb's estimate.  OpenBLAS splits a dgemm among its threads
 * by blocks of rows and columns of C (driver/level3/level3_thread.c), not
 * along k, so an element is the same sum whatever the thread count.
 *
 * The CBLAS is loaded when the first product needs it (blas_load): configure
 * names its shared libraries (SAPPC_CBLAS_SONAMES) and sappc does not link
 * them, because OpenBLAS starts its thread pool from a library constructor
 * and the idle threads spin in sched_yield for a while: that cost every run
 * that never simulates up to a second of system time (issue 18).  A static
 * CBLAS is linked and called directly.
 *
 * Without one, or when the library cannot be loaded, the portable kernel
 * sim_gemm_portable: blocks of MM_ROWS rows x MM_COLS columns keep their
 * double accumulators in L1 while the k loop streams B's row segment once
 * per block; the inner loop is an axpy the compiler vectorises without
 * reassociating a sum.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#ifdef SAPPC_CBLAS_SONAMES
#include <dlfcn.h>
#include <pthread.h>
#endif

#include "simint.h"

#define MM_ROWS 4
#define MM_COLS 256

void sim_gemm_portable(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B,
                       int64_t ldb, const float *bias, float *C, int64_t ldc)
{
	if (m <= 0 || n <= 0)
		return;
	float *bkn = NULL;
	if (tb && k > 0) { /* B is (n, k): make it (k, n) */
		bkn = xmalloc((size_t)(k * n) * sizeof *bkn);
		for (int64_t j = 0; j < n; j++)
			for (int64_t p = 0; p < k; p++)
				bkn[p * n + j] = B[j * ldb + p];
		B = bkn;
		ldb = n;
	}
	double acc[MM_ROWS * MM_COLS];
	for (int64_t i0 = 0; i0 < m; i0 += MM_ROWS) {
		int64_t ni = m - i0 < MM_ROWS ? m - i0 : MM_ROWS;
		for (int64_t j0 = 0; j0 < n; j0 += MM_COLS) {
			int64_t nj = n - j0 < MM_COLS ? n - j0 : MM_COLS;
			for (int64_t r = 0; r < ni; r++)
				for (int64_t j = 0; j < nj; j++)
					acc[r * MM_COLS + j] = bias ? bias[j0 + j] : 0;
			for (int64_t p = 0; p < k; p++) {
				const float *row = B + p * ldb + j0;
				for (int64_t r = 0; r < ni; r++) {
					double av = ta ? A[p * lda + i0 + r] : A[(i0 + r) * lda + p];
					double *ac = acc + r * MM_COLS;
					for (int64_t j = 0; j < nj; j++)
						ac[j] += av * row[j];
				}
			}
			for (int64_t r = 0; r < ni; r++)
				for (int64_t j = 0; j < nj; j++)
					C[(i0 + r) * ldc + j0 + j] = (float)acc[r * MM_COLS + j];
		}
	}
	free(bkn);
}

#ifdef HAVE_CBLAS
#include <cblas.h>

/* The CBLAS entry points gemm.c uses; configure checked that cblas_dgemm
 * has this prototype.  get and set are OpenBLAS's thread count, or NULL. */
typedef void (*DgemmFn)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, int, int, int, double, const double *, int,
                        const double *, int, double, double *, int);
static struct {
	DgemmFn dgemm; /* NULL: the portable kernel */
	int (*get_threads)(void);
	void (*set_threads)(int);
} blas;

#ifdef SAPPC_CBLAS_SONAMES
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

/* the first of configure's libraries that has cblas_dgemm; they stay
 * loaded until exit */
static void blas_load(void)
{
	const char *names = SAPPC_CBLAS_SONAMES;
	char err[256] = "";
	while (*names) {
		size_t len = strcspn(names, ":");
		char name[256];
		snprintf(name, sizeof name, "%.*s", (int)len, names);
		names += len + (names[len] == ':');
		void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			if (!*err)
				snprintf(err, sizeof err, "%s", dlerror());
			continue;
		}
		void *f = dlsym(h, "cblas_dgemm");
		if (!f) {
			dlclose(h);
			continue;
		}
		/* POSIX: a dlsym result converts to a function pointer */
		*(void **)&blas.dgemm = f;
		*(void **)&blas.get_threads = dlsym(h, "openblas_get_num_threads");
		*(void **)&blas.set_threads = dlsym(h, "openblas_set_num_threads");
		if (!blas.get_threads || !blas.set_threads)
			blas.get_threads = NULL, blas.set_threads = NULL;
		return;
	}
	diag_warning("simulate: cannot load cblas_dgemm from %s (%s): matrix products use the portable kernel",
	             SAPPC_CBLAS_SONAMES, *err ? err : "no such symbol");
}
#define BLAS_READY() pthread_once(&blas_once, blas_load)
#else
static void blas_link(void)
{
	if (blas.dgemm)
		return;
#if defined(HAVE_OPENBLAS_SET_NUM_THREADS) && defined(HAVE_OPENBLAS_GET_NUM_THREADS)
	blas.get_threads = openblas_get_num_threads;
	blas.set_threads = openblas_set_num_threads;
#endif
	blas.dgemm = cblas_dgemm;
}
#define BLAS_READY() blas_link()
#endif

/* While the ranks run on threads (exec.c), each product runs on its
 * caller's thread: the ranks already use every core, and OpenBLAS threads
 * on top of them would only contend.  The count does not change a result
 * (see above).  Called on the simulator's main thread only. */
void sim_gemm_serial(int on)
{
	static int own = 0, serial = 0;
	if (on == serial)
		return;
	BLAS_READY();
	if (!blas.set_threads)
		return;
	if (on) {
		own = blas.get_threads();
		if (own > 1)
			blas.set_threads(1);
	} else if (own > 1) {
		blas.set_threads(own);
	}
	serial = on;
}

#define GEMM_BUDGET ((int64_t)1 << 20) /* elements (8 MB of doubles) per block */

/* dst (rows x cols, contiguous) = src (rows x cols, row stride ld) widened */
static void widen(const float *src, int64_t rows, int64_t cols, int64_t ld, double *dst)
{
	for (int64_t i = 0; i < rows; i++)
		for (int64_t j = 0; j < cols; j++)
			dst[i * cols + j] = src[i * ld + j];
}

/* rows of A (or columns of B) per block: k of them fill at most the budget,
 * and a block of C at most 1024 x 1024 */
static int64_t block_of(int64_t total, int64_t k)
{
	int64_t b = GEMM_BUDGET / (k > 1024 ? k : 1024);
	if (b < 64)
		b = 64;
	return b < total ? b : total;
}

void sim_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B,
              int64_t ldb, const float *bias, float *C, int64_t ldc)
{
	if (m <= 0 || n <= 0)
		return;
	BLAS_READY();
	if (!blas.dgemm) {
		sim_gemm_portable(ta, tb, m, n, k, A, lda, B, ldb, bias, C, ldc);
		return;
	}
	if (k <= 0) { /* an empty sum: the bias, or zero */
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++)
				C[i * ldc + j] = bias ? bias[j] : 0.0f;
		return;
	}
	int64_t mb = block_of(m, k), nb = block_of(n, k);
	double *a = xmalloc((size_t)(mb * k) * sizeof *a), *b = xmalloc((size_t)(nb * k) * sizeof *b);
	double *c = xmalloc((size_t)(mb * nb) * sizeof *c);
	for (int64_t j0 = 0; j0 < n; j0 += nb) {
		int64_t nj = n - j0 < nb ? n - j0 : nb;
		/* op(B)[:, j0:j0+nj]: stored (k, n) -> columns j0.., stored (n, k) -> rows j0.. */
		if (tb)
			widen(B + j0 * ldb, nj, k, ldb, b);
		else
			widen(B + j0, k, nj, ldb, b);
		for (int64_t i0 = 0; i0 < m; i0 += mb) {
			int64_t ni = m - i0 < mb ? m - i0 : mb;
			if (ta)
				widen(A + i0, k, ni, lda, a);
			else
				widen(A + i0 * lda, ni, k, lda, a);
			double beta = 0;
			if (bias) {
				for (int64_t i = 0; i < ni; i++)
					for (int64_t j = 0; j < nj; j++)
						c[i * nj + j] = bias[j0 + j];
				beta = 1;
			}
			blas.dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
			           (int)ni, (int)nj, (int)k, 1.0, a, ta ? (int)ni : (int)k, b, tb ? (int)k : (int)nj,
			           beta, c, (int)nj);
			for (int64_t i = 0; i < ni; i++)
				for (int64_t j = 0; j < nj; j++)
					C[(i0 + i) * ldc + j0 + j] = (float)c[i * nj + j];
		}
	}
	free(a);
	free(b);
	free(c);
}

#else /* !HAVE_CBLAS */

void sim_gemm_serial(int on)
{
	(void)on;
}

void sim_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B,
              int64_t ldb, const float *bias, float *C, int64_t ldc)
{
	sim_gemm_portable(ta, tb, m, n, k, A, lda, B, ldb, bias, C, ldc);
}

#endif
