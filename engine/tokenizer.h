/* Tokenizers built from a GGUF file's tokenizer.ggml.* metadata (engine-internal).
 *
 * Two kinds, as tokenizer.ggml.model names them:
 *  - "llama": SentencePiece BPE as llama.cpp and llama2.c run it. Spaces become U+2581 ("▁"), a
 *    non-empty text gets one leading "▁" (tokenizer.ggml.add_space_prefix, default true), the text
 *    is split into UTF-8 characters (a byte outside well-formed UTF-8 alone), and the adjacent pair
 *    whose concatenation is the vocabulary piece of highest score is merged until no pair is a
 *    piece (ties: the leftmost). A character left without a piece becomes its bytes' <0xXX>
 *    tokens (byte fallback), else <unk>. As in SentencePiece, a "▁" in the text itself decodes as
 *    a space.
 *  - "gpt2": byte-level BPE. The text is split by the pre-tokenizer that tokenizer.ggml.pre names
 *    ("llama-bpe"/"llama3"/"llama-v3": Llama 3's split, numbers in groups of up to 3 digits;
 *    "qwen2": the same with single digits); each piece's bytes are mapped to GPT-2's printable
 *    code points and merged by tokenizer.ggml.merges, lowest rank first (ties: the leftmost).
 *
 * Control tokens (BOS, EOS, ...) are never produced from text: a text "<s>" is the characters
 * '<', 's', '>'. Decoding drops control tokens, turns byte tokens back into their bytes, and for
 * SentencePiece removes the one leading space the encoder added. */
#ifndef SIFT_TOKENIZER_H
#define SIFT_TOKENIZER_H

#include "gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum sift_tokenizer_kind {
    SIFT_TOKENIZER_SPM = 0, /* tokenizer.ggml.model = "llama" */
    SIFT_TOKENIZER_BPE      /* tokenizer.ggml.model = "gpt2" */
} sift_tokenizer_kind;

typedef enum sift_bpe_pre {
    SIFT_BPE_PRE_NONE = 0, /* SentencePiece tokenizers */
    SIFT_BPE_PRE_LLAMA3,
    SIFT_BPE_PRE_QWEN2
} sift_bpe_pre;

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
typedef enum sift_token_type {
    SIFT_TOKEN_UNDEFINED = 0,
    SIFT_TOKEN_NORMAL = 1,
    SIFT_TOKEN_UNKNOWN = 2,
    SIFT_TOKEN_CONTROL = 3,
    SIFT_TOKEN_USER_DEFINED = 4,
    SIFT_TOKEN_UNUSED = 5,
    SIFT_TOKEN_BYTE = 6
} sift_token_type;

typedef struct sift_tokenizer sift_tokenizer;

/* Builds the tokenizer a model file describes. The tokenizer copies what it keeps: g may be
 * closed afterwards. */
sift_status sift_tokenizer_create(const sift_gguf *g, sift_tokenizer **out);
void sift_tokenizer_destroy(sift_tokenizer *t);

sift_tokenizer_kind sift_tokenizer_get_kind(const sift_tokenizer *t);
sift_bpe_pre sift_tokenizer_pre(const sift_tokenizer *t);
int32_t sift_tokenizer_vocab_size(const sift_tokenizer *t);
/* Special ids from tokenizer.ggml.{bos,eos,unknown}_token_id; -1 where the file has none. */
int32_t sift_tokenizer_bos(const sift_tokenizer *t);
int32_t sift_tokenizer_eos(const sift_tokenizer *t);
int32_t sift_tokenizer_unk(const sift_tokenizer *t);
/* tokenizer.ggml.add_bos_token; absent: true for SentencePiece, false for GPT-2 BPE (llama.cpp's
 * defaults). */
bool sift_tokenizer_adds_bos(const sift_tokenizer *t);
/* The vocabulary string of a token as the file spells it ("▁the", "Ġthe", "<0x0A>"), not NUL
 * terminated; NULL for an id out of range. */
const char *sift_tokenizer_token_string(const sift_tokenizer *t, int32_t id, size_t *len);
sift_token_type sift_tokenizer_token_type(const sift_tokenizer *t, int32_t id);

/* Encodes len bytes of text (any bytes; invalid UTF-8 passes through byte fallback or byte-level
 * BPE) into ids[cap], BOS first when add_bos. *n gets the number of ids. SIFT_E_INVALID when cap
 * is too small (sift_tokenizer_max_tokens(len) always suffices), or when add_bos is set and the
 * vocabulary has no BOS token, or when a byte has no token and there is no <unk>. */
sift_status sift_tokenizer_encode(const sift_tokenizer *t, const char *text, size_t len, bool add_bos, int32_t *ids,
                                  size_t cap, size_t *n);

/* The pre-tokenizer alone: splits len bytes of text into the pieces BPE then merges within,
 * writing each piece's end offset (in bytes) to ends[cap] and their number to *n. At most len
 * pieces; SIFT_E_INVALID if cap is too small or pre is SIFT_BPE_PRE_NONE. */
sift_status sift_bpe_split(sift_bpe_pre pre, const char *text, size_t len, size_t *ends, size_t cap, size_t *n);

/* The bytes of one token as it reads in running text: byte tokens give their byte, control tokens
 * nothing, "▁" (SentencePiece) and GPT-2's byte symbols become the bytes they stand for. No space
 * is stripped. Writes up to cap bytes to buf; *len gets the full length (SIFT_E_INVALID if it
 * exceeds cap, or for an id out of range). */
sift_status sift_tokenizer_token_bytes(const sift_tokenizer *t, int32_t id, char *buf, size_t cap, size_t *len);

/* The text of a whole sequence (as encoded from the start of a text): the concatenated token
 * bytes, less the leading space SentencePiece's prefix added. Same buffer rules as above. */
sift_status sift_tokenizer_decode(const sift_tokenizer *t, const int32_t *ids, size_t n, char *buf, size_t cap,
                                  size_t *len);

#endif
