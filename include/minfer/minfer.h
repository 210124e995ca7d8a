/*
 * minfer/minfer.h — the application API: runtime and plugins, models,
 * contexts, tokens, sampling.
 *
 * Ownership: every _new/_load returns an object the caller frees with the
 * matching _free; _free(NULL) is a no-op. Constructors return NULL on
 * failure, set *st and write a message into err[err_len] when given.
 */
#ifndef MINFER_H
#define MINFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define MINFER_API __declspec(dllexport)
#else
#define MINFER_API __attribute__((visibility("default")))
#endif

/* The version of these headers. CMakeLists.txt reads the project version
 * from these three lines; minfer_version() is the library's at run time. */
#define MINFER_VERSION_MAJOR 0
#define MINFER_VERSION_MINOR 1
#define MINFER_VERSION_PATCH 0
#define MINFER_VERSION_STRING "0.1.0"
/* One number for #if: MAJOR * 10000 + MINOR * 100 + PATCH. */
#define MINFER_VERSION_NUMBER \
    (MINFER_VERSION_MAJOR * 10000 + MINFER_VERSION_MINOR * 100 + MINFER_VERSION_PATCH)

/* Errors. Every call that can fail returns a minfer_status (or NULL for a
 * constructor, with *st set). The text saying what and where goes to the
 * caller's err[err_len] for constructors, one-shot calls and calls on
 * shared immutable objects (runtime, model, tokenizer: a stored text would
 * race between threads); an object used by one thread at a time keeps the
 * text of its last failure: minfer_ctx_last_error, minfer_sampler_last_error,
 * minfer_detok_last_error. Buffer-size statuses (MINFER_ERR_RANGE with the
 * size needed in *n_out) carry their meaning in the status.
 * minfer_status_str names a status. */

/* Threads. A runtime and a loaded model are immutable: any number of
 * threads may use them at once (and the tokenizer a model lends, see
 * minfer_model_tokenizer). A context, a sampler and a streaming
 * detokenizer are used by one thread at a time: each has state that every
 * call changes; give each thread its own, or lock around them. Logging
 * (minfer_log_set) may call back from any thread. */

/* Library messages (warnings, plugin notes, debug). level: 0 error,
 * 1 warning, 2 info, 3 debug. msg has no trailing newline and lives only
 * for the call. The callback may be called from any thread, also
 * concurrently: it must be thread-safe. */
typedef void (*minfer_log_fn)(int level, const char *msg, void *user);
/* Routes messages at or below max_level to fn (NULL: back to stderr,
 * "minfer: warn: ..."). max_level < 0 keeps the current threshold
 * ($MINFER_LOG_LEVEL: error, warn, info or debug; default warn). */
MINFER_API void minfer_log_set(minfer_log_fn fn, void *user, int max_level);

/* Version of the library, e.g. "0.1.0". Static string. */
MINFER_API const char *minfer_version(void);
/* The plugin ABI (major, minor) this library offers plugins (MINFER_ABI_*
 * of minfer/backend.h when it was built); either pointer may be NULL. */
MINFER_API void minfer_plugin_abi(int *major, int *minor);
/* Static text for a status code, e.g. "device out of memory". */
MINFER_API const char *minfer_status_str(minfer_status st);

/* Name of an element type ("q4_K", "f16"), or "unknown(N)" in a static
 * per-thread buffer for ids this build does not know. */
MINFER_API const char *minfer_type_name(uint32_t type);
/* Parses a type name case-insensitively; false if unknown. */
MINFER_API bool minfer_type_from_name(const char *name, uint32_t *type);

/* ---- sections below are filled in by their modules ---- */

/* ---- runtime and plugins ---- */

/* A runtime is the set of backend plugins found and loaded for this process
 * view, plus a record of every candidate considered (loaded or refused,
 * with the reason). It is immutable once made: any number of threads may
 * read it and use its plugins. Models made from a runtime borrow it; free
 * them before the runtime. Plugin search order: opts->plugin_paths, then
 * $MINFER_PLUGIN_PATH (colon-separated; a directory is scanned for
 * libminfer-*.so, a file is loaded as is), then <dir of libminfer.so>/
 * minfer/backends, then the compile-time install directory. */
struct minfer_runtime;

#define MINFER_RUNTIME_NO_ENV 0x1u          /* ignore $MINFER_PLUGIN_PATH */
#define MINFER_RUNTIME_NO_DEFAULT_DIRS 0x2u /* skip the libminfer-relative and install dirs */

struct minfer_runtime_opts {
    uint32_t struct_size;              /* sizeof(struct minfer_runtime_opts) */
    const char *const *plugin_paths;   /* files or directories, searched first */
    size_t n_plugin_paths;
    uint32_t flags;                    /* MINFER_RUNTIME_* */
    /* Appended in 0.1 (read only when struct_size covers it): when not
     * NULL, directory scans open only libminfer-<only_backend>.so, so a
     * run that names its backend ("cpu") never dlopens the others (the
     * CUDA plugin's runtime initialises at load time). Files named
     * explicitly (plugin_paths, $MINFER_PLUGIN_PATH) are still opened. */
    const char *only_backend;
};

/* Finds and loads plugins. opts may be NULL (defaults). Finding no usable
 * plugin is not an error here (the records say why); only bad arguments
 * and out-of-memory are. Returns NULL on failure with *st set and a
 * message in err[err_len] (either may be NULL/0). Caller frees. */
MINFER_API struct minfer_runtime *minfer_runtime_new(const struct minfer_runtime_opts *opts,
                                                     minfer_status *st, char *err,
                                                     size_t err_len);
/* Shuts down and unloads plugins no other runtime still holds. NULL ok. */
MINFER_API void minfer_runtime_free(struct minfer_runtime *rt);

enum minfer_plugin_state {
    MINFER_PLUGIN_LOADED = 0,    /* usable; the best of its name */
    MINFER_PLUGIN_REJECTED = 1,  /* refused; reason says why */
    MINFER_PLUGIN_SHADOWED = 2,  /* valid, but another plugin of the same name won */
    MINFER_PLUGIN_DUPLICATE = 3, /* same file (by real path) as an earlier candidate */
};

/* One candidate the loader considered. Strings are owned by the runtime
 * and live until minfer_runtime_free; never NULL ("" when unknown). */
struct minfer_plugin_record {
    uint32_t struct_size;        /* set by the caller to sizeof its struct */
    const char *path;            /* as found (file given or dir + entry) */
    const char *origin;          /* "api", "env", "libdir" or "install" */
    const char *name;            /* the plugin's backend name, "" if not reached */
    const char *version;         /* the plugin's own version, "" if not reached */
    uint32_t abi_major, abi_minor; /* what the plugin answered; 0 if not reached */
    int score;                   /* probe result; 0 if not reached or refused */
    bool loaded;                 /* state == MINFER_PLUGIN_LOADED */
    uint32_t state;              /* enum minfer_plugin_state */
    const char *reason;          /* why not loaded; "" when loaded */
    int n_devices;               /* device_count of a loaded plugin, else 0 */
};

/* Number of candidates recorded, in search order. */
MINFER_API size_t minfer_runtime_record_count(const struct minfer_runtime *rt);
/* Copies record i into *out (up to out->struct_size bytes); false if i is
 * out of range or out->struct_size is too small for the header. */
MINFER_API bool minfer_runtime_record(const struct minfer_runtime *rt, size_t i,
                                      struct minfer_plugin_record *out);
/* Directories and files searched, in order, including ones that did not
 * exist; returns NULL past the end. *origin (may be NULL) gets "api",
 * "env", "libdir" or "install". Strings live as long as rt. */
MINFER_API const char *minfer_runtime_search_path(const struct minfer_runtime *rt, size_t i,
                                                  const char **origin);
/* Asks the loaded plugin named backend about one of its devices. The
 * caller sets out->struct_size; at most that many bytes are written.
 * MINFER_ERR_NOT_FOUND if no such backend is loaded, MINFER_ERR_RANGE for
 * a bad device index. */
MINFER_API minfer_status minfer_runtime_device_info(const struct minfer_runtime *rt,
                                                    const char *backend, int device,
                                                    struct minfer_device_info *out);

/* ---- end runtime and plugins ---- */

/* ---- tokens: tokenizer, chat template ---- */

/* A tokenizer read from a GGUF file's tokenizer.* metadata. Supported now:
 * tokenizer.ggml.model "gpt2" (byte-level BPE) with pre-tokenizer "qwen2"
 * (Qwen2, Qwen2.5, Qwen3) or "llama-bpe" (Llama 3). Immutable once made
 * (the word cache lives per call): any number of threads may tokenize at
 * once. It copies what it needs: the GGUF may be closed afterwards. */
struct minfer_tokenizer;
struct minfer_gguf;

/* Token kinds, numbered as GGUF's tokenizer.ggml.token_type stores them. */
enum minfer_token_type {
    MINFER_TOKEN_UNDEFINED = 0,
    MINFER_TOKEN_NORMAL = 1,       /* ordinary vocabulary entry */
    MINFER_TOKEN_UNKNOWN = 2,
    MINFER_TOKEN_CONTROL = 3,      /* <|im_start|>, <|endoftext|>: matched in text only with parse_special */
    MINFER_TOKEN_USER_DEFINED = 4, /* <think>, <tool_call>: always matched in text, as HF does */
    MINFER_TOKEN_UNUSED = 5,       /* padding rows: never produced by tokenize, decode to "" */
    MINFER_TOKEN_BYTE = 6,
};

/* Reads the tokenizer of an open GGUF. NULL on failure with *st set
 * (MINFER_ERR_UNSUPPORTED for a tokenizer model or pre-tokenizer this build
 * lacks, MINFER_ERR_FORMAT for malformed metadata) and a message in
 * err[err_len] (err may be NULL). Caller frees with minfer_tokenizer_free. */
MINFER_API struct minfer_tokenizer *minfer_tokenizer_from_gguf(const struct minfer_gguf *g,
                                                               minfer_status *st, char *err,
                                                               size_t err_len);
MINFER_API void minfer_tokenizer_free(struct minfer_tokenizer *tok); /* NULL is a no-op */

/* Number of token ids (rows of tokenizer.ggml.tokens, padding included). */
MINFER_API int32_t minfer_tokenizer_n_vocab(const struct minfer_tokenizer *tok);
/* Special ids; -1 when the model has none. eot is the end-of-turn token
 * (<|im_end|> for ChatML models), eos the GGUF's eos_token_id. */
MINFER_API int32_t minfer_tokenizer_bos(const struct minfer_tokenizer *tok);
MINFER_API int32_t minfer_tokenizer_eos(const struct minfer_tokenizer *tok);
MINFER_API int32_t minfer_tokenizer_eot(const struct minfer_tokenizer *tok);
MINFER_API int32_t minfer_tokenizer_pad(const struct minfer_tokenizer *tok);
/* Whether the GGUF asks for a BOS token before a prompt (add_bos_token). */
MINFER_API bool minfer_tokenizer_add_bos(const struct minfer_tokenizer *tok);
/* End of generation: eos, eot, <|endoftext|> and the other end tokens. */
MINFER_API bool minfer_tokenizer_is_eog(const struct minfer_tokenizer *tok, int32_t id);
/* enum minfer_token_type of id; MINFER_TOKEN_UNDEFINED when out of range. */
MINFER_API int minfer_tokenizer_token_type(const struct minfer_tokenizer *tok, int32_t id);

/* Text to ids. text[len] need not be NUL-terminated and may hold any bytes:
 * invalid UTF-8 is replaced by U+FFFD per maximal invalid subsequence (as
 * Python's errors="replace" and Rust's from_utf8_lossy do) before encoding.
 * Text is NFC-normalised, except inside matched special tokens. With
 * parse_special, control tokens written in the text (<|im_start|>) become
 * their ids; without it they are encoded as plain text. User-defined tokens
 * (<think>) are always matched. No BOS is added (see minfer_tokenizer_add_bos).
 * Writes up to cap ids; *n_out gets the full count. If cap is too small,
 * returns MINFER_ERR_RANGE with *n_out set to the count needed (call again
 * with a larger buffer); ids may be NULL with cap 0 to ask for the count. */
MINFER_API minfer_status minfer_tokenize(const struct minfer_tokenizer *tok, const char *text,
                                         size_t len, bool parse_special, int32_t *ids,
                                         size_t cap, size_t *n_out);

/* The bytes id stands for when decoded: a normal token's bytes (may be a
 * partial UTF-8 sequence), a control or user-defined token's text, "" for
 * unused ids. NULL when id is out of range. Borrowed: lives as long as tok. */
MINFER_API const char *minfer_token_bytes(const struct minfer_tokenizer *tok, int32_t id,
                                          size_t *len);
/* The vocabulary entry as stored in the GGUF ("Ġhello"). Same lifetime. */
MINFER_API const char *minfer_token_text(const struct minfer_tokenizer *tok, int32_t id,
                                         size_t *len);
/* Longest minfer_token_bytes of any id. */
MINFER_API size_t minfer_tokenizer_max_token_bytes(const struct minfer_tokenizer *tok);

/* Ids to text in one call, the way Hugging Face decode does: byte runs of
 * normal tokens decoded with U+FFFD for invalid UTF-8; control tokens
 * written as their text when render_special, else skipped. Writes up to cap
 * bytes (no NUL); MINFER_ERR_RANGE with *n_out = bytes needed when short;
 * MINFER_ERR_INVALID_ARG for an id out of range. */
MINFER_API minfer_status minfer_detokenize(const struct minfer_tokenizer *tok,
                                           const int32_t *ids, size_t n, bool render_special,
                                           char *out, size_t cap, size_t *n_out);

/* Streaming detokenizer: push ids one at a time, get back only complete
 * UTF-8. A partial sequence is held until the bytes that complete it
 * arrive; bytes that can never form a valid sequence come out as U+FFFD.
 * Borrows tok (free the detokenizer first). Caller frees. */
struct minfer_detok;
/* One thread at a time per detokenizer (it holds partial characters). */
MINFER_API struct minfer_detok *minfer_detok_new(const struct minfer_tokenizer *tok,
                                                 bool render_special);
MINFER_API void minfer_detok_free(struct minfer_detok *d); /* NULL is a no-op */
/* Output room that always suffices for one push or flush. */
MINFER_API size_t minfer_detok_max_out(const struct minfer_detok *d);
/* Appends id; writes the bytes that became complete to out[cap] (no NUL)
 * and their count to *n_out (0 is common: a held partial character). With
 * cap < needed: MINFER_ERR_RANGE, *n_out = needed, state unchanged.
 * MINFER_ERR_INVALID_ARG for an id out of range (state unchanged). */
MINFER_API minfer_status minfer_detok_push(struct minfer_detok *d, int32_t id, char *out,
                                           size_t cap, size_t *n_out);
/* End of stream: emits a held incomplete sequence as U+FFFD and resets. */
MINFER_API minfer_status minfer_detok_flush(struct minfer_detok *d, char *out, size_t cap,
                                            size_t *n_out);
MINFER_API void minfer_detok_reset(struct minfer_detok *d); /* drops held bytes */
/* Text of the last failed push or flush on d, or "". Borrowed until the
 * next call on d. */
MINFER_API const char *minfer_detok_last_error(const struct minfer_detok *d);

/* Chat templates. There is no Jinja engine: a GGUF's tokenizer.chat_template
 * is recognised as one of these formats by its markers, or the caller
 * forces one. */
enum minfer_chat_format {
    MINFER_CHAT_UNKNOWN = 0, /* template absent or not recognised */
    MINFER_CHAT_CHATML = 1,  /* <|im_start|>role\ncontent<|im_end|>\n (Qwen2/2.5/3);
                                a default system prompt found in the template is
                                added when the first message is not "system";
                                Qwen3's <think> handling of past turns applies when
                                the template has it */
    MINFER_CHAT_LLAMA3 = 2,  /* <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
                                (Llama 3.x), contents trimmed */
    MINFER_CHAT_GEMMA = 3,   /* <start_of_turn>user\ncontent<end_of_turn>\n (Gemma 2/3;
                                the assistant is "model", a system message joins the
                                first user turn), contents trimmed */
};

struct minfer_chat_msg {
    const char *role;    /* "system", "user", "assistant" or "tool" */
    const char *content; /* NUL-terminated UTF-8 */
};

/* The format of tok's own template, and the template text (NULL, len 0 if
 * the GGUF has none; borrowed for tok's lifetime). */
MINFER_API enum minfer_chat_format minfer_tokenizer_chat_format(const struct minfer_tokenizer *tok);
MINFER_API const char *minfer_tokenizer_chat_template(const struct minfer_tokenizer *tok,
                                                      size_t *len);
/* Recognises a template text; MINFER_CHAT_UNKNOWN if not a known format. */
MINFER_API enum minfer_chat_format minfer_chat_detect(const char *tmpl, size_t len);
/* "chatml", "llama3", "gemma" <-> their formats; "unknown" for others. from_name
 * false if unknown. */
MINFER_API const char *minfer_chat_format_name(enum minfer_chat_format f);
MINFER_API bool minfer_chat_format_from_name(const char *name, enum minfer_chat_format *f);

/* Renders msgs[n] as the prompt text (to tokenize with parse_special).
 * fmt MINFER_CHAT_UNKNOWN uses tok's detected format and fails with
 * MINFER_ERR_UNSUPPORTED (message says so) if that is unknown; any other
 * fmt forces that format. tok may be NULL when fmt is forced (then no
 * default system prompt). add_generation_prompt appends the assistant
 * header. Writes up to cap bytes plus a NUL when room remains;
 * MINFER_ERR_RANGE with *n_out = bytes needed (without NUL) when short. */
MINFER_API minfer_status minfer_chat_render(const struct minfer_tokenizer *tok,
                                            enum minfer_chat_format fmt,
                                            const struct minfer_chat_msg *msgs, size_t n,
                                            bool add_generation_prompt, char *out, size_t cap,
                                            size_t *n_out, char *err, size_t err_len);

/* minfer_chat_render with options. Zero-initialise, set struct_size. */
struct minfer_chat_opts {
    uint32_t struct_size;       /* sizeof(struct minfer_chat_opts) */
    bool add_generation_prompt;
    int enable_thinking;        /* 0 (or 1): as the template does by default;
                                   -1: Qwen3's "no thinking" (an empty
                                   <think></think> block after the generation
                                   prompt); ignored unless the model's template
                                   has Qwen3's <think> handling */
};
MINFER_API minfer_status minfer_chat_render_opts(const struct minfer_tokenizer *tok,
                                                 enum minfer_chat_format fmt,
                                                 const struct minfer_chat_msg *msgs, size_t n,
                                                 const struct minfer_chat_opts *opts, char *out,
                                                 size_t cap, size_t *n_out, char *err,
                                                 size_t err_len);

/* Reads text in a chat format back into messages: the inverse of
 * minfer_chat_render for what a session file keeps (its tokens,
 * detokenized with special tokens). fn gets each turn in order: its role
 * ("system", "user", "assistant" or "tool"; Gemma's "model" is
 * "assistant"), its content (not NUL-terminated, len bytes, borrowed for
 * the call) and whether its end marker was seen (false: a last turn cut
 * short, such as a reply whose end token was never cached). Turns of
 * other roles and an empty unterminated turn (a generation prompt) are
 * skipped. What a format folded cannot be split again: Gemma's system
 * message comes back as the start of the first user turn. fn returning
 * nonzero stops the parse with MINFER_ERR_STATE. A format this build does
 * not read is MINFER_ERR_UNSUPPORTED (message in err). */
typedef int (*minfer_chat_msg_fn)(const char *role, const char *content, size_t len,
                                  bool complete, void *user);
MINFER_API minfer_status minfer_chat_parse(enum minfer_chat_format fmt, const char *text,
                                           size_t len, minfer_chat_msg_fn fn, void *user,
                                           char *err, size_t err_len);

/* ---- end tokens ---- */

/* ---- sampling ---- */

/* Picks the next token from a row of logits. Stage order, each stage
 * skipped when off:
 *   1. penalties over the last penalty_last_n accepted ids (minfer_sampler_accept):
 *      repetition (logit > 0 ? logit / r : logit * r), then
 *      logit -= count * frequency_penalty + (count > 0) * presence_penalty
 *   2. greedy: temperature <= 0 (or top_k == 1) returns the arg max (lowest id on ties)
 *   3. top-k: keep the k highest logits (partial selection, no full sort)
 *   4. temperature: logits / temperature, softmax over what is left
 *   5. top-p: keep the smallest highest-probability prefix whose mass >= top_p
 *   6. min-p: drop tokens with p < min_p * p_max
 *   7. draw from the renormalised rest with the sampler's own PRNG
 *      (xoshiro256**, seeded through splitmix64; one 53-bit draw per token,
 *      none when a single candidate is left). Same seed, same logits: same
 *      ids; across platforms as far as their expf rounds alike (everything
 *      else is integer or plain IEEE float arithmetic).
 * Ties between equal logits are ordered by lower id first. */
struct minfer_sampler_params {
    uint32_t struct_size;    /* sizeof(struct minfer_sampler_params): start from
                                minfer_sampler_default_params(), which sets it */
    float temperature;       /* <= 0: greedy. default 0.8 */
    int32_t top_k;           /* <= 0: off. default 40 */
    float top_p;             /* >= 1: off. default 0.95 */
    float min_p;             /* <= 0: off. default 0.05 */
    float repeat_penalty;    /* 1: off. default 1.0 */
    float frequency_penalty; /* 0: off */
    float presence_penalty;  /* 0: off */
    int32_t penalty_last_n;  /* window of accepted ids; 0: penalties off. default 64 */
    uint64_t seed;           /* default 0 */
};

struct minfer_sampler;

/* Defaults as documented in struct minfer_sampler_params. */
MINFER_API struct minfer_sampler_params minfer_sampler_default_params(void);
/* NULL on failure (bad parameter: message names it). Caller frees. A
 * sampler is used by one thread at a time. */
MINFER_API struct minfer_sampler *minfer_sampler_new(const struct minfer_sampler_params *p,
                                                     int32_t n_vocab, minfer_status *st,
                                                     char *err, size_t err_len);
MINFER_API void minfer_sampler_free(struct minfer_sampler *s); /* NULL is a no-op */
/* Records id in the penalty window (prompt ids and each sampled id). */
MINFER_API void minfer_sampler_accept(struct minfer_sampler *s, int32_t id);
/* Clears the window and reseeds with seed. */
MINFER_API void minfer_sampler_reset(struct minfer_sampler *s, uint64_t seed);
/* Samples from logits[n_vocab] (not modified; n_vocab must equal the
 * sampler's). Does not accept the result: call minfer_sampler_accept.
 * MINFER_ERR_INVALID_ARG for a size mismatch or when no logit is finite. */
MINFER_API minfer_status minfer_sampler_sample(struct minfer_sampler *s, const float *logits,
                                               int32_t n_vocab, int32_t *out_id);
/* Text of the last failed minfer_sampler_sample on s, or "". Borrowed
 * until the next call on s. */
MINFER_API const char *minfer_sampler_last_error(const struct minfer_sampler *s);

/* ---- end sampling ---- */

/* ---- models and contexts ---- */

/* A model is a validated GGUF (hyperparameters and tensor table checked
 * against its architecture's descriptor) bound to one backend plugin of a
 * runtime. Weights stay in the file's mapping (a CPU backend reads them in
 * place). A model is immutable once loaded: any number of contexts, on any
 * threads, may share it. It borrows the runtime: free the model first. */
struct minfer_model;
/* A context is one inference engine over a model: its own backend
 * instance, KV cache, compute buffers and cached graphs, holding up to
 * n_seq_max sequences that decode together (minfer_ctx_decode_batch).
 * Thread rules: every call on one context (decode, logits, sequence
 * operations, sessions, last_error) must come from one thread at a time —
 * the caller serialises them (a server runs one loop that owns the
 * context); borrowed pointers (logits, error text) stay valid only until
 * the next call on that context. Different contexts, even of one model,
 * may run on different threads at once. It borrows the model: free
 * contexts first. */
struct minfer_ctx;

/* Progress report for long operations (load, long prefills): done of
 * total units. Return false to cancel (the operation fails with
 * MINFER_ERR_STATE). Called on the calling thread. */
typedef bool (*minfer_progress_cb)(uint64_t done, uint64_t total, void *user);

struct minfer_model_params {
    uint32_t struct_size;          /* sizeof(struct minfer_model_params) */
    const char *backend;           /* plugin name ("cpu", "cuda"); NULL or "auto":
                                      the best loaded backend that supports the model */
    minfer_progress_cb progress;   /* may be NULL */
    void *progress_user;
};

/* Fills *p with defaults (backend auto, no progress). */
MINFER_API void minfer_model_params_default(struct minfer_model_params *p);

/* Loads the GGUF at path. p may be NULL (defaults). On failure returns
 * NULL, sets *st and writes a message naming what was wrong (unknown
 * architecture, a missing or malformed hyperparameter, a missing tensor, a
 * tensor of the wrong shape or type, no backend) into err[err_len].
 * The caller frees the model with minfer_model_free. */
MINFER_API struct minfer_model *minfer_model_load(struct minfer_runtime *rt, const char *path,
                                                  const struct minfer_model_params *p,
                                                  minfer_status *st, char *err,
                                                  size_t err_len);
/* Same over an already open GGUF (file or memory). The model takes
 * ownership of g, also on failure (it is closed then). */
MINFER_API struct minfer_model *minfer_model_load_gguf(struct minfer_runtime *rt,
                                                       struct minfer_gguf *g,
                                                       const struct minfer_model_params *p,
                                                       minfer_status *st, char *err,
                                                       size_t err_len);
MINFER_API void minfer_model_free(struct minfer_model *m); /* NULL is a no-op */

/* What a loaded model is. Strings are borrowed for the model's life. */
struct minfer_model_info {
    uint32_t struct_size;          /* set by the caller to sizeof its struct */
    const char *arch;              /* "qwen2", "qwen3" */
    const char *name;              /* general.name, or "" */
    const char *backend;           /* the backend the model runs on */
    const char *type_desc;         /* dominant weight type of the matrices, e.g. "q4_K" */
    int32_t n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    uint64_t n_params;             /* elements of all weights */
    uint64_t size_bytes;           /* bytes of all weights */
    int32_t n_ctx_max;             /* longest context: n_ctx_train, or more where the
                                      GGUF carries RoPE scaling (YaRN, linear) */
};
/* Copies up to info->struct_size bytes. */
MINFER_API void minfer_model_info(const struct minfer_model *m, struct minfer_model_info *info);
/* The model's tokenizer, read from its GGUF once (on the first call) and
 * shared: every later call returns the same object, borrowed for the
 * model's life (do not free it). Thread-safe, like the model. NULL when
 * the GGUF has no usable tokenizer, with *st and err set (either may be
 * NULL/0). */
MINFER_API const struct minfer_tokenizer *minfer_model_tokenizer(const struct minfer_model *m,
                                                                 minfer_status *st, char *err,
                                                                 size_t err_len);
/* The model's GGUF (for minfer_tokenizer_from_gguf). Borrowed for the
 * model's life. */
MINFER_API const struct minfer_gguf *minfer_model_gguf(const struct minfer_model *m);

struct minfer_ctx_params {
    uint32_t struct_size;          /* sizeof(struct minfer_ctx_params) */
    int32_t n_ctx;                 /* KV cells; 0 = min(model's context, 4096); capped
                                      by the model's training context */
    int32_t n_batch;               /* most tokens per forward pass; 0 = 512 */
    uint32_t type_k, type_v;       /* KV cache element type: MINFER_TYPE_F32, F16
                                      (default) or Q8_0 */
    int32_t n_threads;             /* backend threads; 0 = backend's choice */
    uint32_t flags;                /* MINFER_CTX_* */
    minfer_progress_cb progress;   /* prefill progress (tokens), may be NULL */
    void *progress_user;
    int32_t n_seq_max;             /* sequences the context may hold (ids 0 .. n_seq_max-1);
                                      0 = 1; at most 65536 */
};
#define MINFER_CTX_NO_GRAPHS 0x1u  /* never offer graph replay to the backend */
/* Pad batched decode steps (one token per sequence) to a power of two with
 * copies of their own tokens, so a few captured graphs replay every batch
 * size; on by itself on a GPU backend with graph replay. Results do not
 * change (the copies write the same values and their outputs are dropped). */
#define MINFER_CTX_PAD_BATCHES 0x2u

MINFER_API void minfer_ctx_params_default(struct minfer_ctx_params *p);
/* Makes a context: creates a backend instance, registers the weights and
 * allocates the KV cache. p may be NULL (defaults). NULL on failure with
 * *st and err set. The caller frees with minfer_ctx_free. */
MINFER_API struct minfer_ctx *minfer_ctx_new(struct minfer_model *m,
                                             const struct minfer_ctx_params *p,
                                             minfer_status *st, char *err, size_t err_len);
MINFER_API void minfer_ctx_free(struct minfer_ctx *c); /* NULL is a no-op */

#define MINFER_DECODE_ALL_LOGITS 0x1u /* keep the logits of every token, not just the last */

/* Appends tokens[n] to the context's sequence (positions n_past ..
 * n_past + n - 1) and runs the forward pass (in chunks of n_batch).
 * Afterwards minfer_ctx_logits gives the last token's logits, or with
 * MINFER_DECODE_ALL_LOGITS every token's. MINFER_ERR_RANGE when n_past + n
 * exceeds n_ctx or a token id is outside the vocabulary (nothing is
 * changed then); other errors name the node and backend that failed (see
 * minfer_ctx_last_error); after a failed pass the cache holds the tokens
 * of the chunks that completed. */
MINFER_API minfer_status minfer_ctx_decode(struct minfer_ctx *c, const int32_t *tokens,
                                           int32_t n, uint32_t flags);
/* Logits row i (0-based among the rows the last decode kept; -1 = the
 * last), n_vocab floats. NULL when no such row. Borrowed until the next
 * decode, truncate or free. */
MINFER_API const float *minfer_ctx_logits(const struct minfer_ctx *c, int32_t i);
/* Rows minfer_ctx_logits can return. */
MINFER_API int32_t minfer_ctx_n_logits(const struct minfer_ctx *c);
/* Tokens in the cache, and the cache capacity. */
MINFER_API int32_t minfer_ctx_n_past(const struct minfer_ctx *c);
MINFER_API int32_t minfer_ctx_n_ctx(const struct minfer_ctx *c);
/* Forgets every token at position >= n_past (0 clears the context), so a
 * shared prefix is reused. MINFER_ERR_RANGE if n_past exceeds the cache's. */
MINFER_API minfer_status minfer_ctx_truncate(struct minfer_ctx *c, int32_t n_past);
/* Text of the last failure on c, or "". Borrowed until the next call on c. */
MINFER_API const char *minfer_ctx_last_error(const struct minfer_ctx *c);

/* ---- many sequences ---- */

/* The single-sequence calls above act on sequence 0: minfer_ctx_decode
 * appends at minfer_ctx_seq_pos_max(c, 0) + 1, minfer_ctx_n_past is that
 * plus one, minfer_ctx_truncate(c, n) removes positions >= n. */

/* A batch of tokens of any sequences. A token with several sequence ids
 * is stored once and shared (a common prompt prefix). */
struct minfer_batch {
    uint32_t struct_size;            /* sizeof(struct minfer_batch) */
    int32_t n_tokens;
    const int32_t *tokens;           /* [n_tokens] */
    const int32_t *pos;              /* [n_tokens] position of each token in its sequence(s) */
    const int32_t *n_seq_id;         /* [n_tokens] how many sequences the token belongs to */
    const int32_t *const *seq_ids;   /* [n_tokens][n_seq_id[i]] */
    const uint8_t *logits;           /* [n_tokens] nonzero: keep this token's logits; NULL:
                                        only the last token's */
};
/* One forward pass (chunked by n_batch) over the whole batch: each token
 * attends to the cells of its first sequence at positions <= its own.
 * A token's position must not be held by its sequence already (remove it
 * first); positions need not be consecutive. MINFER_ERR_FULL when the
 * cache cannot hold the batch (the error names the sequence and the
 * numbers); MINFER_ERR_RANGE / INVALID_ARG for a bad token, position or
 * sequence id (named by batch index). In these cases nothing changes.
 * After a backend failure the cache holds the chunks that completed.
 * On the CPU plugin a sequence's logits are bit-identical to decoding it
 * alone with the same thread count and the same split into passes. */
MINFER_API minfer_status minfer_ctx_decode_batch(struct minfer_ctx *c,
                                                 const struct minfer_batch *b);
/* Logits of batch token i (its index in the last batch; it must have had
 * logits[i] set), n_vocab floats; NULL otherwise. Borrowed until the next
 * decode. minfer_ctx_logits(c, k) gives the k-th kept row, in batch order. */
MINFER_API const float *minfer_ctx_batch_logits(const struct minfer_ctx *c, int32_t i);
/* Removes positions [p0, p1) of sequence seq (p1 < 0: to the end; seq < 0:
 * every sequence). Cells no sequence holds any more become free. */
MINFER_API minfer_status minfer_ctx_seq_remove(struct minfer_ctx *c, int32_t seq, int32_t p0,
                                               int32_t p1);
/* Sequence dst also holds src's positions [p0, p1) (p1 < 0: to the end),
 * replacing its own at those positions. The cells are shared, not copied:
 * a fork costs no cache; the sequences' later tokens get their own cells. */
MINFER_API minfer_status minfer_ctx_seq_copy(struct minfer_ctx *c, int32_t src, int32_t dst,
                                             int32_t p0, int32_t p1);
/* Removes every sequence but seq. */
MINFER_API minfer_status minfer_ctx_seq_keep(struct minfer_ctx *c, int32_t seq);
/* Largest position of seq; -1 when it is empty or seq is out of range. */
MINFER_API int32_t minfer_ctx_seq_pos_max(const struct minfer_ctx *c, int32_t seq);
/* Cells in use (held by at least one sequence) and the cache's cells;
 * either pointer may be NULL. */
MINFER_API void minfer_ctx_kv_usage(const struct minfer_ctx *c, int32_t *used, int32_t *total);
/* Moves the used cells to the front of the cache (the backend's
 * copy_cells); results do not change. Decode compacts by itself when a
 * lone sequence's cells are scattered; *moved (may be NULL) counts the
 * cells that moved. */
MINFER_API minfer_status minfer_ctx_kv_compact(struct minfer_ctx *c, int32_t *moved);

/* Session files: one sequence's tokens and KV cells. The file carries a
 * versioned header, the model's fingerprint (tensor names, types and
 * shapes; a hash of the metadata), the KV types and layout, and an XXH3
 * checksum over everything. Save follows the output rules of
 * minfer_gguf_writer_write (a regular file or a new name; a symlink's
 * target is replaced; the file appears only when complete). Load refuses
 * anything but a regular file. tokens[n_tokens] are the caller's record of the
 * sequence (what it was prompted with and generated), stored as given. */
MINFER_API minfer_status minfer_ctx_seq_save(struct minfer_ctx *c, int32_t seq, const char *path,
                                             const int32_t *tokens, int32_t n_tokens);
/* Replaces sequence seq with the file's cells and copies its tokens into
 * tokens[cap] (*n_tokens, may be NULL, gets their count). A file of
 * another model, KV type or layout, or one that is truncated, corrupt or
 * of another version is refused with an error naming the file and the
 * reason (MINFER_ERR_INVALID_ARG, MINFER_ERR_FORMAT, MINFER_ERR_UNSUPPORTED);
 * MINFER_ERR_RANGE when cap is too small, MINFER_ERR_FULL when the cache
 * has no room. On any failure the context and the file are unchanged. */
MINFER_API minfer_status minfer_ctx_seq_load(struct minfer_ctx *c, int32_t seq, const char *path,
                                             int32_t *tokens, int32_t cap, int32_t *n_tokens);

/* ---- end models and contexts ---- */

/* ---- model tools: quantize, synth ---- */

/* File types as stored in general.file_type (llama.cpp's llama_ftype
 * numbering, so either tool's files read the same). */
enum minfer_ftype {
    MINFER_FTYPE_ALL_F32 = 0,
    MINFER_FTYPE_MOSTLY_F16 = 1,
    MINFER_FTYPE_MOSTLY_Q4_0 = 2,
    MINFER_FTYPE_MOSTLY_Q4_1 = 3,
    MINFER_FTYPE_MOSTLY_Q8_0 = 7,
    MINFER_FTYPE_MOSTLY_Q5_0 = 8,
    MINFER_FTYPE_MOSTLY_Q5_1 = 9,
    MINFER_FTYPE_MOSTLY_Q4_K_S = 14,
    MINFER_FTYPE_MOSTLY_Q4_K_M = 15,
    MINFER_FTYPE_MOSTLY_Q5_K_S = 16,
    MINFER_FTYPE_MOSTLY_Q5_K_M = 17,
    MINFER_FTYPE_MOSTLY_Q6_K = 18,
    MINFER_FTYPE_MOSTLY_BF16 = 32,
};

/* Parses a quantize/synth TYPE ("Q4_K_M", "f16"; case-insensitive). As in
 * llama-quantize, "Q4_K" and "Q5_K" name the _M mixes. False if unknown. */
MINFER_API bool minfer_ftype_from_name(const char *name, uint32_t *ftype);
/* "Q4_K_M", "F16", ...; "unknown" for other values. Static string. */
MINFER_API const char *minfer_ftype_name(uint32_t ftype);
/* Element type of the bulk of a file type's weights (Q4_K for Q4_K_M);
 * MINFER_TYPE_COUNT for unknown file types. */
MINFER_API uint32_t minfer_ftype_base_type(uint32_t ftype);

/* Facts about the whole file that the per-tensor rule depends on. */
struct minfer_mix {
    uint32_t ftype;     /* enum minfer_ftype */
    bool pure;          /* every 2-D weight gets exactly the base type */
    bool has_output;    /* the file has output.weight (else token_embd is the output) */
    int32_t n_attn_v;   /* attn_v.weight tensors in the file */
    int32_t n_layer;    /* <arch>.block_count */
};

/* Element type that tensor `name` (n_dims dims, ne[0] = row length,
 * currently of type cur_type) gets in a file of m->ftype: the rule of
 * llama.cpp's llama-quantize, documented in docs/quantize.md. Shared by
 * minfer_quantize and minfer_synth. */
MINFER_API uint32_t minfer_mix_tensor_type(const struct minfer_mix *m, const char *name,
                                           uint32_t n_dims, const int64_t *ne,
                                           uint32_t cur_type);

/* Progress of a long write: bytes of tensor data produced so far of total.
 * Called from the writing thread, at most a few hundred times per file. */
typedef void (*minfer_progress_fn)(void *user, uint64_t done, uint64_t total);

struct minfer_quantize_opts {
    uint32_t struct_size;        /* sizeof(struct minfer_quantize_opts) */
    uint32_t ftype;              /* enum minfer_ftype */
    bool pure;                   /* no mix: 2-D weights exactly the base type */
    int32_t n_threads;           /* <= 0: one per online CPU */
    minfer_progress_fn progress; /* optional */
    void *progress_user;
    const volatile int *cancel;  /* optional: once *cancel is nonzero (e.g. set by
                                    a signal handler) the write stops with
                                    MINFER_ERR_STATE and leaves no file */
    bool allow_requantize;       /* accept an input with quantized 2-D weights
                                    (appended: a struct_size without it reads false) */
};

/* Rewrites the GGUF in_path as out_path with every tensor converted to the
 * type the mix gives it (tensors already of their target type are copied).
 * An input whose 2-D weights are already quantized (anything but F32, F16,
 * BF16) is refused with MINFER_ERR_UNSUPPORTED unless allow_requantize
 * (then it is dequantized first). out_path naming the same file as in_path
 * (also through a symlink or hard link) is MINFER_ERR_INVALID_ARG. The
 * output rules of minfer_gguf_writer_write apply: a regular file or a new
 * name (devices, FIFOs, directories refused; a symlink is followed and its
 * target replaced), appearing only when complete. Metadata is copied;
 * general.file_type and general.quantization_version are set. Errors name
 * the tensor. */
MINFER_API minfer_status minfer_quantize(const char *in_path, const char *out_path,
                                         const struct minfer_quantize_opts *o, char *err,
                                         size_t err_len);

/* The dimensions of a synthetic model. */
struct minfer_synth_shape {
    char arch[16];        /* "qwen2", "qwen3", "llama", "gemma3" or "qwen3moe" */
    char name[32];        /* "qwen2.5-7b", "custom" (general.name gets a suffix) */
    int32_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    float rope_theta, rms_eps;
    bool tied;            /* output.weight shares token_embd.weight */
    bool qkv_bias;        /* attn_q/k/v.bias (qwen2); descriptive: the tensors */
    bool qk_norm;         /* attn_q_norm/attn_k_norm (qwen3); written come from the
                             architecture's descriptor */
    /* appended for the model families of ABI 1.1 (zero where unused) */
    int32_t n_expert, n_expert_used, n_ff_exp; /* qwen3moe */
    int32_t sliding_window;                    /* gemma3 */
    bool spm;             /* built-in vocabulary: SentencePiece (Mistral, Gemma) instead
                             of byte-level BPE */
};

/* Fills *shape for arch from a known model name (qwen2.5-0.5b, -1.5b, -3b,
 * -7b; qwen3-0.6b, -1.7b, -4b, -8b; llama3.2-1b, llama3.1-8b, mistral-7b;
 * gemma3-1b, gemma3-4b; qwen3-30b-a3b; dims from their config.json) or from
 * "custom:n_embd=N,n_layer=N,n_head=N,n_head_kv=N,head_dim=N,n_ff=N,
 * n_vocab=N,n_ctx=N,tied=0|1" (unnamed keys default to the arch's
 * smallest model). */
MINFER_API minfer_status minfer_synth_shape_parse(const char *arch, const char *spec,
                                                  struct minfer_synth_shape *shape,
                                                  char *err, size_t err_len);

/* An explicit BPE tokenizer for a synthetic model; everything borrowed for
 * the duration of minfer_synth. */
struct minfer_synth_vocab {
    const char *const *tokens;  /* n_tokens strings (byte-level BPE spelling) */
    const size_t *token_lens;
    const int32_t *token_types; /* llama.cpp's: 1 normal, 3 control, 4 user-defined, 5 unused */
    uint64_t n_tokens;
    const char *const *merges;  /* "a b" */
    const size_t *merge_lens;
    uint64_t n_merges;
    int32_t bos_id, eos_id, pad_id; /* -1 when absent */
    const char *pre;                /* tokenizer.ggml.pre, e.g. "qwen2" */
    const char *chat_template;      /* NULL when absent */
};

struct minfer_synth_opts {
    uint32_t struct_size;            /* sizeof(struct minfer_synth_opts) */
    struct minfer_synth_shape shape;
    uint32_t ftype;                  /* enum minfer_ftype; mixes as in quantize */
    bool pure;
    uint64_t seed;                   /* same seed, same bytes, at any thread count */
    int32_t n_threads;               /* <= 0: one per online CPU */
    const char *tokenizer_gguf;      /* copy tokenizer.* keys from this GGUF, or */
    const struct minfer_synth_vocab *vocab; /* this; neither: a built-in byte-level
                                               vocabulary with Qwen's special tokens */
    minfer_progress_fn progress;     /* optional */
    void *progress_user;
    const volatile int *cancel;      /* optional: as in minfer_quantize_opts */
};

/* Writes a random-weight model: valid quant blocks with small finite
 * scales, norms near 1, so a forward pass gives finite logits. With path
 * set the file appears there only when complete (mem may be NULL). With
 * path NULL the file is built in memory: *mem receives a buffer the caller
 * frees with minfer_synth_mem_free and *mem_size its size (it goes through
 * a temporary file under $TMPDIR or /tmp). On failure *mem is NULL. */
MINFER_API minfer_status minfer_synth(const struct minfer_synth_opts *o, const char *path,
                                      void **mem, size_t *mem_size, char *err, size_t err_len);
MINFER_API void minfer_synth_mem_free(void *mem); /* NULL is a no-op */

/* ---- end model tools ---- */

#ifdef __cplusplus
}
#endif

#endif /* MINFER_H */
