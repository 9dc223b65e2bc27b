/* io.c - whole-file input and all-or-nothing output.
 *
 * The output set: every file a run writes goes to a temporary beside its
 * destination (out_open), or into a staging directory (out_dir_stage); a
 * completed file (out_commit) waits in the run's pending set, and
 * out_publish() renames the whole set into place only once the run has
 * succeeded.  A failed run calls out_discard() (also run at exit), which
 * removes every temporary: the destinations keep their old bytes.  Standard
 * output and devices or pipes (-o /dev/null, a FIFO) cannot wait; they are
 * written as the run goes. */
#define _DEFAULT_SOURCE 1 /* madvise, MAP_ANONYMOUS */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sappc.h"

/* The input file as mapped by io_read_file (at most one at a time: sappc
 * reads one input).  A private mapping over anonymous zero pages: the two
 * NULs flex wants after the text are already there, the text is not copied,
 * and the pages the scanner wrote (flex puts a NUL after each token and
 * puts the byte back) can be given back once read (io_file_drop): they then
 * read back from the file as they were. */
static char *mapped;
static size_t mapped_len;

static int map_file(FILE *f, size_t n, char **buf)
{
#if defined(MAP_ANONYMOUS) && defined(MADV_DONTNEED)
	long pg = sysconf(_SC_PAGESIZE);
	if (mapped || pg <= 0)
		return -1;
	size_t len = (n + 2 + (size_t)pg - 1) / (size_t)pg * (size_t)pg;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -1;
	if (mmap(p, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fileno(f), 0) == MAP_FAILED) {
		munmap(p, len);
		return -1;
	}
	mapped = p;
	mapped_len = len;
	*buf = p;
	return 0;
#else
	(void)f, (void)n, (void)buf;
	return -1;
#endif
}

int io_read_file(const char *path, char **buf, size_t *len)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	const char *what = f == stdin ? "standard input" : path;
	if (!f) {
		diag_error("cannot open '%s': %s", path, strerror(errno));
		return -1;
	}
	struct stat st;
	size_t cap = 1 << 16;
	if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode) && f == stdin) {
		diag_error("standard input is a directory");
		return -1;
	}
	if (f != stdin && fstat(fileno(f), &st) == 0) {
		if (S_ISDIR(st.st_mode)) {
			diag_error("'%s' is a directory", path);
			fclose(f);
			return -1;
		}
		if (S_ISREG(st.st_mode) && st.st_size > 0) {
			if (map_file(f, (size_t)st.st_size, buf) == 0) {
				fclose(f);
				*len = (size_t)st.st_size;
				return 0;
			}
			cap = (size_t)st.st_size + 2;
		}
	}
	char *b = xmalloc(cap);
	size_t n = 0;
	int rerrno = 0;
	for (;;) {
		if (cap - n <= 2) { /* always room for the data plus two NULs */
			cap *= 2;
			b = xrealloc(b, cap);
		}
		errno = 0;
		size_t r = fread(b + n, 1, cap - n - 2, f);
		n += r;
		if (r == 0 && (feof(f) || ferror(f))) {
			rerrno = errno;
			break;
		}
	}
	int err = ferror(f);
	if (f != stdin)
		fclose(f);
	if (err) {
		if (rerrno)
			diag_error("cannot read '%s': %s", what, strerror(rerrno));
		else
			diag_error("cannot read '%s'", what);
		free(b);
		return -1;
	}
	/* two NULs: flex's yy_scan_buffer wants them at the end */
	b[n] = b[n + 1] = 0;
	*buf = b;
	*len = n;
	return 0;
}

void io_file_drop(const char *p, size_t n)
{
#if defined(MADV_DONTNEED)
	if (!mapped || p < mapped || p >= mapped + mapped_len)
		return;
	if (n > (size_t)(mapped + mapped_len - p))
		n = (size_t)(mapped + mapped_len - p);
	long pg = sysconf(_SC_PAGESIZE);
	if (pg <= 0)
		return;
	size_t off = (size_t)(p - mapped), a = (off + (size_t)pg - 1) / (size_t)pg * (size_t)pg;
	size_t e = (off + n) / (size_t)pg * (size_t)pg;
	if (e > a)
		madvise(mapped + a, e - a, MADV_DONTNEED);
#else
	(void)p, (void)n;
#endif
}

void io_free_file(char *buf)
{
	if (buf && buf == mapped) {
		munmap(mapped, mapped_len);
		mapped = NULL;
		mapped_len = 0;
		return;
	}
	free(buf);
}

/* ------------------------------------------------------------ the set */

enum { P_WRITING, P_DONE, P_GONE };

typedef struct Pending {
	char *tmp;  /* the temporary file or staging directory */
	char *dest; /* where it goes: symbolic links resolved */
	char *name; /* the destination as the user spelled it, for messages */
	int dir;    /* a staging directory (merged into dest when dest exists) */
	int state;
} Pending;

static Pending *pend;
static int npend, cappend;
static pid_t owner; /* a forked worker must not clean up its parent's set */

static void discard_at_exit(void)
{
	out_discard();
}

/* Killed (Ctrl-C, a closed pipe): remove the temporary files, with unlink
 * only (async-signal-safe), then die of the signal.  A staging directory
 * with files in it stays: walking it is not safe in a handler. */
static const int fatal_signals[] = {SIGHUP, SIGINT, SIGPIPE, SIGTERM};

static void on_fatal_signal(int sig)
{
	if (owner == getpid())
		for (int i = 0; i < npend; i++)
			if (pend[i].state != P_GONE && (pend[i].dir ? rmdir(pend[i].tmp) : unlink(pend[i].tmp)) == 0)
				pend[i].state = P_GONE;
	signal(sig, SIG_DFL);
	raise(sig);
}

static void catch_fatal_signals(void)
{
	for (size_t i = 0; i < sizeof fatal_signals / sizeof *fatal_signals; i++) {
		struct sigaction sa, old;
		if (sigaction(fatal_signals[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN)
			continue; /* ignored by whoever started us: keep it so */
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_fatal_signal;
		sigemptyset(&sa.sa_mask);
		sigaction(fatal_signals[i], &sa, NULL);
	}
}

/* the handler reads pend: not while it moves or is freed */
static void block_fatal_signals(sigset_t *old)
{
	sigset_t block;
	sigemptyset(&block);
	for (size_t i = 0; i < sizeof fatal_signals / sizeof *fatal_signals; i++)
		sigaddset(&block, fatal_signals[i]);
	sigprocmask(SIG_BLOCK, &block, old);
}

static int pend_add(char *tmp, char *dest, const char *name, int dir)
{
	if (!owner) {
		owner = getpid();
		atexit(discard_at_exit);
		catch_fatal_signals();
	}
	sigset_t old;
	block_fatal_signals(&old);
	if (npend == cappend) {
		cappend = cappend ? 2 * cappend : 8;
		pend = xrealloc(pend, (size_t)cappend * sizeof *pend);
	}
	pend[npend] = (Pending){tmp, dest, xstrdup(name), dir, dir ? P_DONE : P_WRITING};
	int slot = npend++;
	sigprocmask(SIG_SETMASK, &old, NULL);
	return slot;
}

static char *path_join(const char *dir, size_t dn, const char *name)
{
	char *p = xmalloc(dn + strlen(name) + 2);
	sprintf(p, "%.*s/%s", (int)dn, dir, name);
	return p;
}

/* rm -r of a temporary of ours (lstat: a link is removed, not followed) */
static void remove_tree(const char *path)
{
	struct stat st;
	if (lstat(path, &st) != 0)
		return;
	if (!S_ISDIR(st.st_mode)) {
		unlink(path);
		return;
	}
	DIR *d = opendir(path);
	if (d) {
		struct dirent *e;
		while ((e = readdir(d))) {
			if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
				continue;
			char *sub = path_join(path, strlen(path), e->d_name);
			remove_tree(sub);
			free(sub);
		}
		closedir(d);
	}
	rmdir(path);
}

static void pend_drop(Pending *p)
{
	if (p->state != P_GONE)
		remove_tree(p->tmp);
	p->state = P_GONE;
}

static int is_system_path(const char *p)
{
	return strncmp(p, "/dev/", 5) == 0 || strncmp(p, "/proc/", 6) == 0;
}

/* The file a path writes: the end of its chain of symbolic links (a link
 * that dangles names the file to create), as cp writes through a link.
 * NULL with errno ELOOP on a cycle.  *sys: the chain went through /dev or
 * /proc (/dev/stdout -> /proc/self/fd/1 -> a file the shell opened): that
 * file is open already and must be written in place, and nothing may ever be
 * renamed over a name in /dev. */
static char *follow_links(const char *path, int *sys)
{
	char *p = xstrdup(path);
	char buf[PATH_MAX];
	*sys = 0;
	for (int hops = 0; hops < 40; hops++) {
		struct stat st;
		*sys |= is_system_path(p);
		if (lstat(p, &st) != 0 || !S_ISLNK(st.st_mode))
			return p;
		ssize_t k = readlink(p, buf, sizeof buf - 1);
		if (k < 0)
			return p;
		buf[k] = 0;
		const char *slash = strrchr(p, '/');
		char *q = buf[0] == '/' || !slash ? xstrdup(buf) : path_join(p, (size_t)(slash - p), buf);
		free(p);
		p = q;
	}
	free(p);
	errno = ELOOP;
	return NULL;
}

static mode_t cur_umask(void)
{
	mode_t um = umask(022);
	umask(um);
	return um;
}

/* a temporary "NAME.tmpXXXXXX" beside dest (NAME shortened to fit NAME_MAX) */
static char *temp_name(const char *dest)
{
	const char *slash = strrchr(dest, '/');
	size_t dn = slash ? (size_t)(slash - dest) + 1 : 0, bn = strlen(dest + dn);
	if (bn > NAME_MAX - 10)
		bn = NAME_MAX - 10;
	char *t = xmalloc(dn + bn + 11);
	sprintf(t, "%.*s%.*s.tmpXXXXXX", (int)dn, dest, (int)bn, dest + dn);
	return t;
}

/* a device, a pipe or a socket, or a file inside a staging directory: written
 * as the run goes (renaming a temporary over a device would replace it) */
static int open_in_place(OutFile *o, const char *path)
{
	o->f = fopen(path, "w");
	if (!o->f) {
		diag_error("cannot open '%s': %s", path, strerror(errno));
		return -1;
	}
	o->path = xstrdup(path);
	return 0;
}

int out_open(OutFile *o, const char *path)
{
	memset(o, 0, sizeof *o);
	o->slot = -1;
	if (!path || strcmp(path, "-") == 0) {
		o->f = stdout;
		return 0;
	}
	int sys;
	char *dest = *path ? follow_links(path, &sys) : (errno = ENOENT, NULL);
	if (!dest) {
		diag_error("cannot create '%s': %s", path, strerror(errno));
		return -1;
	}
	struct stat st;
	int exists = stat(sys ? path : dest, &st) == 0; /* the kernel resolves /proc's links */
	if (exists && (!S_ISREG(st.st_mode) || sys)) {
		free(dest);
		if (S_ISDIR(st.st_mode)) {
			diag_error("cannot write '%s': it is a directory", path);
			return -1;
		}
		return open_in_place(o, path);
	}
	char *tmp = temp_name(dest);
	int fd = mkstemp(tmp);
	if (fd < 0) {
		diag_error("cannot create '%s': %s", path, strerror(errno));
		free(tmp);
		free(dest);
		return -1;
	}
	o->slot = pend_add(tmp, dest, path, 0);
	o->path = pend[o->slot].name;
	/* an existing file keeps its owner and permission bits (chown first: it
	 * may clear set-id bits); a new one gets what the umask allows */
	if (exists) {
		if (st.st_uid != geteuid() || st.st_gid != getegid())
			(void)!fchown(fd, st.st_uid, st.st_gid);
		fchmod(fd, st.st_mode & 07777);
	} else {
		fchmod(fd, 0666 & ~cur_umask()); /* what open(2) would give */
	}
	o->f = fdopen(fd, "w");
	if (!o->f) {
		diag_error("cannot create '%s': %s", path, strerror(errno));
		close(fd);
		pend_drop(&pend[o->slot]);
		return -1;
	}
	return 0;
}

int out_open_staged(OutFile *o, const char *path)
{
	memset(o, 0, sizeof *o);
	o->slot = -1;
	return open_in_place(o, path);
}

int out_commit(OutFile *o)
{
	int rc = 0, err = 0;
	if (o->f == stdout) {
		if (fflush(stdout) != 0 || ferror(stdout)) {
			diag_error("write error on standard output");
			rc = -1;
		}
		o->f = NULL;
		return rc;
	}
	if (!o->f)
		return -1;
	if (fflush(o->f) != 0 || ferror(o->f)) {
		err = errno;
		rc = -1;
	}
	if (fclose(o->f) != 0 && !rc) {
		err = errno;
		rc = -1;
	}
	o->f = NULL;
	if (rc != 0)
		diag_error("cannot write '%s': %s", o->path, err ? strerror(err) : "write error");
	if (o->slot < 0) /* written in place */
		free(o->path);
	else if (rc != 0)
		pend_drop(&pend[o->slot]);
	else
		pend[o->slot].state = P_DONE;
	o->path = NULL;
	o->slot = -1;
	return rc;
}

void out_abort(OutFile *o)
{
	if (o->f && o->f != stdout)
		fclose(o->f);
	o->f = NULL;
	if (o->slot >= 0)
		pend_drop(&pend[o->slot]);
	else
		free(o->path);
	o->path = NULL;
	o->slot = -1;
}

const char *out_dir_stage(const char *path)
{
	size_t n = strlen(path);
	if (!n) {
		diag_error("cannot create directory '': %s", strerror(ENOENT));
		return NULL;
	}
	while (n > 1 && path[n - 1] == '/')
		n--;
	char *dest = xmalloc(n + 1);
	memcpy(dest, path, n);
	dest[n] = 0;
	struct stat st;
	char *tmp;
	if (stat(dest, &st) == 0) {
		if (!S_ISDIR(st.st_mode)) {
			diag_error("cannot write into '%s': it is not a directory", path);
			free(dest);
			return NULL;
		}
		tmp = path_join(dest, n, "sappc.tmpXXXXXX"); /* inside: on dest's file system */
	} else {
		tmp = temp_name(dest);
	}
	if (!mkdtemp(tmp)) {
		diag_error("cannot create directory '%s': %s", path, strerror(errno));
		free(tmp);
		free(dest);
		return NULL;
	}
	int slot = pend_add(tmp, dest, dest, 1); /* may move pend */
	return pend[slot].tmp;
}

/* move every entry of the staging directory from into the existing
 * directory to, merging subdirectories that exist on both sides */
static int merge_dir(const char *from, const char *to)
{
	DIR *d = opendir(from);
	if (!d)
		return -1;
	char **names = NULL;
	size_t nn = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d))) { /* names first: the loop below empties from */
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (nn == cap) {
			cap = cap ? 2 * cap : 16;
			names = xrealloc(names, cap * sizeof *names);
		}
		names[nn++] = xstrdup(e->d_name);
	}
	closedir(d);
	int rc = 0;
	for (size_t i = 0; i < nn; i++) {
		char *src = path_join(from, strlen(from), names[i]), *dst = path_join(to, strlen(to), names[i]);
		struct stat ss, ds;
		if (rc == 0) {
			if (lstat(src, &ss) == 0 && S_ISDIR(ss.st_mode) && stat(dst, &ds) == 0 && S_ISDIR(ds.st_mode))
				rc = merge_dir(src, dst);
			else if (rename(src, dst) != 0)
				rc = -1;
		}
		free(src);
		free(dst);
		free(names[i]);
	}
	free(names);
	return rc;
}

/* Can from be moved onto to without a rename failing half way through the
 * set (a file over a directory, a directory over a file)?  Every entry of a
 * staged directory is checked against the directory it is merged into. */
static int can_place(const char *from, const char *to, const char *name)
{
	struct stat fs, ts;
	if (lstat(from, &fs) != 0 || stat(to, &ts) != 0)
		return 1; /* rename reports what is wrong */
	if (!S_ISDIR(fs.st_mode) || !S_ISDIR(ts.st_mode)) {
		if (!S_ISDIR(fs.st_mode) && !S_ISDIR(ts.st_mode))
			return 1;
		diag_error("cannot write '%s': %s", name, strerror(S_ISDIR(ts.st_mode) ? EISDIR : ENOTDIR));
		return 0;
	}
	DIR *d = opendir(from);
	if (!d)
		return 1;
	int ok = 1;
	struct dirent *e;
	while (ok && (e = readdir(d)))
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
			char *src = path_join(from, strlen(from), e->d_name),
			     *dst = path_join(to, strlen(to), e->d_name);
			char *sub = path_join(name, strlen(name), e->d_name);
			ok = can_place(src, dst, sub);
			free(src);
			free(dst);
			free(sub);
		}
	closedir(d);
	return ok;
}

int out_publish(void)
{
	int rc = 0;
	for (int i = 0; i < npend && rc == 0; i++) /* check everything before moving anything */
		if (pend[i].state == P_DONE && !can_place(pend[i].tmp, pend[i].dest, pend[i].name))
			rc = -1;
	for (int i = 0; i < npend && rc == 0; i++) {
		Pending *p = &pend[i];
		struct stat st;
		if (p->state == P_GONE)
			continue;
		if (p->state != P_DONE)
			die("output '%s' was opened but neither committed nor aborted", p->name);
		if (!p->dir)
			rc = rename(p->tmp, p->dest);
		else if (stat(p->dest, &st) == 0)
			rc = merge_dir(p->tmp, p->dest);
		else /* mkdtemp made it private */
			rc = chmod(p->tmp, 0777 & ~cur_umask()) != 0 || rename(p->tmp, p->dest) != 0 ? -1 : 0;
		if (rc != 0)
			diag_error("cannot write '%s': %s", p->name, strerror(errno));
		else if (!p->dir || access(p->tmp, F_OK) != 0)
			p->state = P_GONE;
	}
	out_discard(); /* what is left: failures, emptied staging directories */
	return rc;
}

void out_discard(void)
{
	if (owner != getpid())
		return;
	sigset_t old;
	block_fatal_signals(&old);
	for (int i = 0; i < npend; i++) {
		pend_drop(&pend[i]);
		free(pend[i].tmp);
		free(pend[i].dest);
		free(pend[i].name);
	}
	free(pend);
	pend = NULL;
	npend = cappend = 0;
	sigprocmask(SIG_SETMASK, &old, NULL);
}

/* ------------------------------------------------------------ usage check */

/* What tells two spellings of an output apart: device and inode when the
 * file exists, else its resolved path (links followed, directory made
 * absolute).  inplace: a device or pipe, which two outputs may share. */
typedef struct FileKey {
	int exists, inplace;
	dev_t dev;
	ino_t ino;
	char *path;
} FileKey;

static void file_key(const char *path, FileKey *k)
{
	struct stat st;
	int sys;
	memset(k, 0, sizeof *k);
	char *p = follow_links(path, &sys);
	if (stat(path, &st) == 0) {
		k->exists = 1;
		k->inplace = (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) || sys;
		k->dev = st.st_dev;
		k->ino = st.st_ino;
		free(p);
		return;
	}
	if (!p)
		p = xstrdup(path);
	char *slash = strrchr(p, '/');
	char *dir = slash == p ? xstrdup("/") : slash ? xstrdup(p) : xstrdup(".");
	if (slash && slash != p)
		dir[slash - p] = 0;
	char *rd = realpath(dir, NULL);
	if (rd) {
		k->path = path_join(rd, strlen(rd), slash ? slash + 1 : p);
		free(rd);
		free(p);
	} else {
		k->path = p;
	}
	free(dir);
}

static int key_same(const FileKey *a, const FileKey *b)
{
	if (a->exists != b->exists)
		return 0;
	return a->exists ? a->dev == b->dev && a->ino == b->ino : strcmp(a->path, b->path) == 0;
}

int out_check_paths(const char *in, int n, const char *const names[], const char *const paths[])
{
	FileKey *k = xcalloc((size_t)n + 1, sizeof *k);
	int bad = 0;
	if (strcmp(in, "-") != 0)
		file_key(in, &k[n]);
	for (int i = 0; i < n && !bad; i++) {
		if (!paths[i] || strcmp(paths[i], "-") == 0)
			continue;
		file_key(paths[i], &k[i]);
		if (k[i].inplace)
			continue;
		if (strcmp(in, "-") != 0 && (strcmp(in, paths[i]) == 0 || key_same(&k[i], &k[n]))) {
			fprintf(stderr, "sappc: refusing to write output over the input file '%s'\n", in);
			bad = 1;
		}
		for (int j = 0; j < i && !bad; j++)
			if (paths[j] && strcmp(paths[j], "-") != 0 && !k[j].inplace && key_same(&k[i], &k[j])) {
				fprintf(stderr, "sappc: %s and %s name the same file '%s'\n", names[j], names[i],
				        paths[i]);
				bad = 1;
			}
	}
	for (int i = 0; i <= n; i++)
		free(k[i].path);
	free(k);
	if (bad)
		fputs("Try 'sappc --help' for more information.\n", stderr);
	return bad ? -1 : 0;
}
