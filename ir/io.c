/* io.c - whole-file input and atomic output.  Output goes to a temporary
 * file beside the target and is renamed over it only on success, so a
 * failed run never leaves partial output and never clobbers anything.
 * Only regular files (or new paths) are replaced that way: a device or a
 * pipe (/dev/null, /dev/stdout, a FIFO) is written in place, since renaming
 * a temporary over /dev/null would turn it into a regular file for the
 * whole system. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sappc.h"

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
		if (S_ISREG(st.st_mode) && st.st_size > 0)
			cap = (size_t)st.st_size + 2;
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

int out_open(OutFile *o, const char *path)
{
	memset(o, 0, sizeof *o);
	if (!path || strcmp(path, "-") == 0) {
		o->f = stdout;
		return 0;
	}
	struct stat st;
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
		o->f = fopen(path, "w");
		if (!o->f) {
			diag_error("cannot open '%s': %s", path, strerror(errno));
			return -1;
		}
		o->path = xstrdup(path); /* tmp stays NULL: written in place */
		return 0;
	}
	o->path = xstrdup(path);
	size_t n = strlen(path);
	o->tmp = xmalloc(n + 16);
	snprintf(o->tmp, n + 16, "%s.tmpXXXXXX", path);
	int fd = mkstemp(o->tmp);
	if (fd < 0) {
		diag_error("cannot create '%s': %s", path, strerror(errno));
		free(o->tmp);
		free(o->path);
		o->tmp = o->path = NULL;
		return -1;
	}
	fchmod(fd, 0644);
	o->f = fdopen(fd, "w");
	if (!o->f) {
		close(fd);
		unlink(o->tmp);
		diag_error("cannot create '%s': %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

int out_commit(OutFile *o)
{
	int rc = 0;
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
	if (fflush(o->f) != 0 || ferror(o->f))
		rc = -1;
	if (fclose(o->f) != 0)
		rc = -1;
	o->f = NULL;
	if (rc == 0 && o->tmp && rename(o->tmp, o->path) != 0)
		rc = -1;
	if (rc != 0) {
		diag_error("cannot write '%s': %s", o->path, strerror(errno));
		if (o->tmp)
			unlink(o->tmp);
	}
	free(o->tmp);
	free(o->path);
	o->tmp = o->path = NULL;
	return rc;
}

void out_abort(OutFile *o)
{
	if (o->f && o->f != stdout) {
		fclose(o->f);
		if (o->tmp)
			unlink(o->tmp);
	}
	o->f = NULL;
	free(o->tmp);
	free(o->path);
	o->tmp = o->path = NULL;
}
