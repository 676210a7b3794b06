/* A narrow door to ISA-L's igzip (Debian: libisal-dev), compiled by
 * build.rs when the header is there. Rust sees only opaque pointers and
 * sizes: `struct isal_zstream` is 82 KB of internal state whose layout
 * changes between ISA-L releases, so it is never mirrored in Rust. */
#include <isa-l/igzip_lib.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct sy_isal {
	struct isal_zstream z;
	int level;
	uint32_t level_buf_size;
	uint8_t level_buf[];
};

static uint32_t level_buf_size(int level)
{
	switch (level) {
	case 1:
		return ISAL_DEF_LVL1_DEFAULT;
	case 2:
		return ISAL_DEF_LVL2_DEFAULT;
	case 3:
		return ISAL_DEF_LVL3_DEFAULT;
	default:
		return 0;
	}
}

/* A compressor for `level` (0 to 3), or NULL (no memory, no such level). */
struct sy_isal *sy_isal_new(int level)
{
	if (level < 0 || level > 3)
		return NULL;
	uint32_t lb = level_buf_size(level);
	struct sy_isal *s = NULL;
	/* 64-byte aligned: igzip's hash tables are read by vector code. */
	if (posix_memalign((void **)&s, 64, sizeof(*s) + lb) != 0)
		return NULL;
	memset(s, 0, sizeof(*s));
	s->level = level;
	s->level_buf_size = lb;
	return s;
}

void sy_isal_free(struct sy_isal *s)
{
	free(s);
}

/* One gzip member of in[0..n) into out[0..cap). Returns the bytes written,
 * 0 when `cap` was too small (the caller falls back), -1 on any other
 * error. */
int64_t sy_isal_gzip(struct sy_isal *s, const uint8_t *in, uint32_t n, uint8_t *out, uint32_t cap)
{
	struct isal_zstream *z = &s->z;
	isal_deflate_stateless_init(z);
	z->level = s->level;
	z->level_buf = s->level_buf_size ? s->level_buf : NULL;
	z->level_buf_size = s->level_buf_size;
	z->gzip_flag = IGZIP_GZIP;
	z->end_of_stream = 1;
	z->flush = NO_FLUSH;
	z->next_in = (uint8_t *)in;
	z->avail_in = n;
	z->next_out = out;
	z->avail_out = cap;
	int r = isal_deflate_stateless(z);
	if (r == STATELESS_OVERFLOW)
		return 0;
	if (r != COMP_OK || z->avail_in != 0)
		return -1;
	return (int64_t)z->total_out;
}
