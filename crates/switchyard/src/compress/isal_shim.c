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

/* The token buffer of levels 1-3: larger makes longer blocks (fewer
 * Huffman headers). Whole bodies get ISA-L's default; a stream, which lives
 * as long as its response, the small size. */
static uint32_t level_buf_size(int level, int small)
{
	switch (level) {
	case 1:
		return small ? ISAL_DEF_LVL1_SMALL : ISAL_DEF_LVL1_DEFAULT;
	case 2:
		return small ? ISAL_DEF_LVL2_SMALL : ISAL_DEF_LVL2_DEFAULT;
	case 3:
		return small ? ISAL_DEF_LVL3_SMALL : ISAL_DEF_LVL3_DEFAULT;
	default:
		return 0;
	}
}

/* A compressor for `level` (0 to 3), or NULL (no memory, no such level).
 * `small`: a stream's token buffer instead of a whole body's. */
struct sy_isal *sy_isal_new(int level, int small)
{
	if (level < 0 || level > 3)
		return NULL;
	uint32_t lb = level_buf_size(level, small);
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

static void setup(struct sy_isal *s)
{
	struct isal_zstream *z = &s->z;
	z->level = s->level;
	z->level_buf = s->level_buf_size ? s->level_buf : NULL;
	z->level_buf_size = s->level_buf_size;
	z->gzip_flag = IGZIP_GZIP;
}

/* One gzip member of in[0..n) into out[0..cap). Returns the bytes written,
 * 0 when `cap` was too small (the caller falls back), -1 on any other
 * error. */
int64_t sy_isal_gzip(struct sy_isal *s, const uint8_t *in, uint32_t n, uint8_t *out, uint32_t cap)
{
	struct isal_zstream *z = &s->z;
	isal_deflate_stateless_init(z);
	setup(s);
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

/* Starts a new gzip stream (a fresh or a reused state). */
void sy_isal_stream_start(struct sy_isal *s)
{
	isal_deflate_init(&s->z);
	setup(s);
}

/* Feeds in[0..n) to the stream; mode 0 compresses on, 1 makes everything so
 * far decodable (sync flush), 2 ends the stream. Writes at most `cap` bytes
 * and says how many were consumed and written. Returns 0 when the call's
 * work is done, 1 when the output filled first (call again with the rest of
 * the input and the same mode), -1 on an error. */
int sy_isal_stream(struct sy_isal *s, const uint8_t *in, uint32_t n, int mode, uint8_t *out,
		   uint32_t cap, uint32_t *consumed, uint32_t *written)
{
	struct isal_zstream *z = &s->z;
	z->next_in = (uint8_t *)in;
	z->avail_in = n;
	z->flush = mode == 0 ? NO_FLUSH : SYNC_FLUSH;
	z->end_of_stream = mode == 2;
	z->next_out = out;
	z->avail_out = cap;
	if (isal_deflate(z) != COMP_OK)
		return -1;
	*consumed = n - z->avail_in;
	*written = cap - z->avail_out;
	if (z->avail_in != 0)
		return 1;
	switch (mode) {
	case 0:
		return 0;
	case 1:
		/* ISA-L: room left in the output means the flush completed. */
		return z->avail_out == 0;
	default:
		return z->internal_state.state != ZSTATE_END;
	}
}
