// stdsort_ref.cc - ir/stdsort.c against the real std::stable_sort (libstdc++).
// Built and run by testsuite/stdsort.sh.  Sorts positions whose symbols are
// ordered by (1) the comparator of parallel-lowering.md §4.2 step 6 over
// Reshape / AllConcat(axis) / Slice(axis), every list up to length 6 and
// random ones up to 80, and (2) random relations, most of them not strict
// weak orders; the permutations must be identical.  Prints TAP.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

extern "C" {
typedef int (*StdLess)(int x, int y, const void *ctx);
void std_stable_sort(int *a, int n, int *buf, StdLess less, const void *ctx);
}

struct Ctx {
	const std::vector<int> *sym;
	const std::vector<char> *rel; // rel[x * k + y]: x before y
	int k;
};

static int less_c(int x, int y, const void *p)
{
	const Ctx *c = static_cast<const Ctx *>(p);
	return (*c->rel)[(*c->sym)[x] * c->k + (*c->sym)[y]];
}

// symbols: 0 = Reshape, 1..4 = AllConcat axis 0..3, 5..8 = Slice axis 0..3
static std::vector<char> step6_relation()
{
	std::vector<char> r(81);
	for (int a = 0; a < 9; a++)
		for (int b = 0; b < 9; b++) {
			bool v;
			if (a == 0 || b == 0)
				v = false;
			else if (a <= 4 && b >= 5)
				v = true;
			else if (a >= 5 && b <= 4)
				v = false;
			else if (a <= 4)
				v = a > b; // larger AllConcat axes first
			else
				v = a < b; // smaller Slice axes first
			r[a * 9 + b] = v;
		}
	return r;
}

static uint64_t rng = 88172645463325252ULL;
static uint64_t rnd()
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static long checked, bad;

static void check(const std::vector<int> &sym, const std::vector<char> &rel, int k)
{
	int n = (int)sym.size();
	Ctx c = {&sym, &rel, k};
	std::vector<int> want(n), got(n), buf((n + 1) / 2 + 1);
	for (int i = 0; i < n; i++)
		want[i] = got[i] = i;
	std::stable_sort(want.begin(), want.end(), [&](int x, int y) { return less_c(x, y, &c) != 0; });
	std_stable_sort(got.data(), n, buf.data(), less_c, &c);
	checked++;
	if (want != got && bad++ < 5) {
		std::printf("# mismatch for n=%d k=%d: symbols", n, k);
		for (int s : sym)
			std::printf(" %d", s);
		std::printf("\n");
	}
}

int main()
{
#ifndef __GLIBCXX__
	std::printf("1..0 # SKIP the C++ library is not libstdc++\n");
	return 0;
#else
	std::vector<char> rel = step6_relation();
	for (int n = 0; n <= 6; n++) {
		long total = 1;
		for (int i = 0; i < n; i++)
			total *= 9;
		std::vector<int> sym(n);
		for (long code = 0; code < total; code++) {
			long x = code;
			for (int i = 0; i < n; i++, x /= 9)
				sym[i] = (int)(x % 9);
			check(sym, rel, 9);
		}
	}
	for (int t = 0; t < 200000; t++) {
		std::vector<int> sym(7 + rnd() % 74);
		for (int &s : sym)
			s = (int)(rnd() % 9);
		check(sym, rel, 9);
	}
	std::printf("%s 1 - the step-6 comparator: %ld lists\n", bad ? "not ok" : "ok", checked);
	long b1 = bad;
	checked = 0;
	for (int t = 0; t < 200000; t++) {
		int k = 2 + (int)(rnd() % 7);
		std::vector<char> r(k * k);
		for (char &v : r)
			v = (char)(rnd() % 3 == 0);
		for (int i = 0; i < k; i++)
			r[i * k + i] = 0;
		std::vector<int> sym(rnd() % 90);
		for (int &s : sym)
			s = (int)(rnd() % k);
		check(sym, r, k);
	}
	std::printf("%s 2 - random relations: %ld lists\n", bad > b1 ? "not ok" : "ok", checked);
	std::printf("1..2\n");
	return bad != 0;
#endif
}
