/*
 * model-tokenizer.c — minfer_model_tokenizer: the tokenizer a model lends,
 * read from its GGUF on first use. Models are shared across threads, so
 * the first callers may race: each builds one, a compare-and-swap keeps
 * the first and the others free theirs (building twice is rare and
 * harmless; a lock would make every call pay for it).
 */
#include <stdatomic.h>

#include "model.h"
#include "runtime/error.h"

const struct minfer_tokenizer *minfer_model_tokenizer(const struct minfer_model *m,
                                                      minfer_status *st, char *err,
                                                      size_t err_len)
{
    minfer_status s_ = MINFER_OK;
    if (!m) {
        s_ = errf(err, err_len, MINFER_ERR_INVALID_ARG, "minfer_model_tokenizer: no model");
        goto out;
    }
    struct minfer_model *mm = (struct minfer_model *)m; /* the cache only */
    struct minfer_tokenizer *tok = atomic_load(&mm->tok);
    if (tok)
        goto out_ok;
    tok = minfer_tokenizer_from_gguf(m->gguf, &s_, err, err_len);
    if (!tok)
        goto out;
    struct minfer_tokenizer *expected = NULL;
    if (!atomic_compare_exchange_strong(&mm->tok, &expected, tok)) {
        minfer_tokenizer_free(tok);
        tok = expected;
    }
out_ok:
    if (st)
        *st = MINFER_OK;
    return tok;
out:
    if (st)
        *st = s_;
    return NULL;
}
