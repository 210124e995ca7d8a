/*
 * tokenizer.h — internal interface of the tokenizer (core/text/tokenizer*.c:
 * tokenizer.c builds it, tokenizer-norm.c, -encode.c and -decode.c run it).
 *
 * The tokenizer is assembled from parts that are each data or one file:
 *   - a source: plain arrays (tokens, types, merges, ids) read from a GGUF
 *     by tokenizer.c, or built by a test from tokenizer.json;
 *   - a vocabulary kind (struct tok_vocab_ops): "gpt2" byte-level BPE in
 *     tokenizer-bpe.c; "llama" SentencePiece BPE in tokenizer-spm.c;
 *   - a pre-tokenizer (struct tok_pretok): regexes + flags in
 *     pretok-<name>.c, listed once in tokenizer.c's registry.
 * Text flow of minfer_tokenize: repair invalid UTF-8 -> split out special
 * tokens -> per plain segment NFC -> regex split -> vocab encode per piece.
 */
#ifndef MINFER_CORE_TOKENIZER_H
#define MINFER_CORE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "minfer/minfer.h"

/* ---- sources ---- */

/* Everything a tokenizer is built from, as borrowed arrays. Strings are not
 * NUL-terminated (lengths given). types may be NULL (all normal). */
struct tok_source {
    const char *model;                  /* "gpt2" */
    size_t model_len;
    const char *pre;                    /* "qwen2"; NULL = "default" */
    size_t pre_len;
    uint32_t n_tokens;
    const char *const *tokens;          /* [n_tokens] */
    const size_t *token_lens;           /* [n_tokens] */
    const int32_t *types;               /* [n_tokens] enum minfer_token_type, or NULL */
    uint32_t n_merges;
    const char *const *merges;          /* [n_merges] "left right" */
    const size_t *merge_lens;           /* [n_merges] */
    int32_t bos, eos, eot, pad;         /* -1 when absent */
    bool add_bos;
    const float *scores;                /* [n_tokens] piece scores (SentencePiece), or NULL */
    int add_space_prefix;               /* SentencePiece: 1 / 0, -1 when absent */
    const char *chat_template;          /* NULL when absent */
    size_t chat_template_len;
};

/* Builds a tokenizer from arrays (copies everything). NULL on failure with
 * *st and a message. */
struct minfer_tokenizer *tok_new(const struct tok_source *src, minfer_status *st, char *err,
                                 size_t err_len);

/* ---- pre-tokenizers ---- */

#define TOK_MAX_REGEX 4

/* Unicode's White_Space set as the inside of a PCRE2 character class: what
 * Rust's regex (Hugging Face tokenizers) means by \s. PCRE2's own \s adds
 * U+180E, so pre-tokenizer regexes spell it with this. */
#define TOK_WS "\\t-\\r\\x20\\x85\\xA0\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}" \
               "\\x{202F}\\x{205F}\\x{3000}"

struct tok_pretok {
    const char *name;                   /* tokenizer.ggml.pre value */
    const char *regex[TOK_MAX_REGEX];   /* applied in order; each splits the pieces
                                           of the previous one, matches and gaps kept
                                           (HF Split behaviour "Isolated") */
    bool nfc;                           /* NFC-normalise plain text first */
    bool ignore_merges;                 /* BPE: a piece that is itself a token is
                                           taken whole before any merging (HF
                                           "ignore_merges", Llama 3) */
};

extern const struct tok_pretok tok_pretok_qwen2;
extern const struct tok_pretok tok_pretok_llama3;

/* ---- vocabulary kinds ---- */

/* Growable id vector used by encoders. */
struct tok_ids {
    int32_t *v;
    size_t n, cap;
};
minfer_status tok_ids_push(struct tok_ids *ids, int32_t id);

struct tok_vocab_ops {
    const char *model; /* tokenizer.ggml.model value */
    /* Builds the kind's state into tok->vocab from src; also fills tok's
     * token bytes (tok_set_token_bytes) for normal tokens. */
    minfer_status (*init)(struct minfer_tokenizer *tok, const struct tok_source *src,
                          char *err, size_t err_len);
    void (*free)(void *vocab);
    /* Encodes one pre-tokenized piece of valid UTF-8, appending ids. */
    minfer_status (*encode_piece)(const struct minfer_tokenizer *tok, const char *s, size_t n,
                                  struct tok_ids *out);
    /* The kind's own pre-tokenizer, whatever tokenizer.ggml.pre says; NULL:
     * the registry's entry for tokenizer.ggml.pre. */
    const struct tok_pretok *pretok;
};

extern const struct tok_vocab_ops tok_vocab_bpe;
extern const struct tok_vocab_ops tok_vocab_spm;
extern const struct tok_pretok tok_pretok_spm;

/* ---- the tokenizer object ---- */

struct minfer_tokenizer {
    int32_t n_vocab;
    uint8_t *types;          /* [n_vocab] enum minfer_token_type */
    char *text;              /* GGUF strings, NUL-separated arena */
    uint32_t *text_off;      /* [n_vocab + 1] */
    char *bytes;             /* decoded bytes per token, arena */
    uint32_t *bytes_off;     /* [n_vocab + 1] */
    size_t bytes_len, bytes_cap; /* arena fill while building */
    int32_t n_bytes_set;     /* ids whose bytes are set */
    size_t max_bytes;

    const struct tok_vocab_ops *ops;
    void *vocab;             /* the kind's state */
    const struct tok_pretok *pretok;
    void *re[TOK_MAX_REGEX]; /* pcre2_code_8 * */
    int n_re;

    /* matchable special tokens (control + user-defined), sorted by first
     * byte then length descending; first[b]..first[b+1] indexes them */
    int32_t *special;
    uint32_t n_special;
    uint32_t first[257];

    int32_t bos, eos, eot, pad;
    bool add_bos;
    bool strip_space_prefix; /* SentencePiece with a space prefix: detokenize drops it */
    int32_t eog[8];
    int n_eog;

    char *chat_template;     /* NUL-terminated copy or NULL */
    size_t chat_template_len;
    int chat_format;         /* enum minfer_chat_format */
    char *chat_default_system; /* default system prompt found in the template, or NULL */
    bool chat_think;         /* Qwen3: past turns' <think> blocks are dropped */
};

/* Sets the decoded bytes of the next token id (a vocab kind calls it
 * during init for ids 0..n_vocab-1 in order, once each). */
minfer_status tok_append_token_bytes(struct minfer_tokenizer *tok, const char *b, size_t n);

/* ---- UTF-8 ---- */

/* Decodes one code point from s[n] (n >= 1). Returns the sequence length
 * (1..4) and sets *cp, or returns -k where k >= 1 is the length of the
 * maximal invalid subpart to replace by one U+FFFD, or 0 when s[n] is a
 * valid but incomplete prefix (only possible when the sequence is cut by n). */
int tok_utf8_next(const uint8_t *s, size_t n, uint32_t *cp);
/* Encodes cp into out (4 bytes room); returns length. */
int tok_utf8_put(uint32_t cp, char *out);
/* Returns a valid-UTF-8 version of s[n]: s itself when already valid
 * (*owned = NULL), else a malloc'd copy (*owned, the caller frees it) with
 * every maximal invalid subpart and a cut-off tail replaced by U+FFFD. */
minfer_status tok_utf8_repair(const char *s, size_t n, const char **out, size_t *out_n,
                              char **owned);
/* NFC of valid UTF-8 s[n]: *out = s when nothing changes (*owned NULL),
 * else a malloc'd copy (*owned, the caller frees it). */
minfer_status tok_nfc(const char *s, size_t n, const char **out, size_t *out_n, char **owned);

/* ---- chat (chat.c) ---- */

/* Fills tok->chat_format and tok->chat_default_system from the template. */
minfer_status tok_chat_init(struct minfer_tokenizer *tok);

#endif /* MINFER_CORE_TOKENIZER_H */
