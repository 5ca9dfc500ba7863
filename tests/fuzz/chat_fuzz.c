/* libFuzzer harness for chat templates (engine/chat.c): the input is a flags byte, then fields
 * separated by NUL bytes: a template (a name or Jinja source), then role and content pairs (a role
 * of one byte stands for "system", "user" or "assistant" by its value, so every branch is reached;
 * longer roles are taken as they are). Whatever the bytes: the template's name is NULL or one sift
 * knows, and names itself; a known template writes every message's content (trimmed at most); the
 * size asked with cap 0 is the size written; a buffer too small is refused without a byte written
 * past it, holding the start of the text. Build and run with tests/fuzz/run.sh. */
#include "sift.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_MESSAGES = 8 };

static const char *const known[] = {"chatml", "llama3", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip"};

static bool is_known(const char *name)
{
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(name, known[i])) return true;
    return false;
}

/* s without ASCII white space at either end is inside text. */
static bool contains_trimmed(const char *text, const char *s)
{
    size_t start = 0, end = strlen(s);
    while (start < end && (s[start] == ' ' || (s[start] >= '\t' && s[start] <= '\r'))) start++;
    while (end > start && (s[end - 1] == ' ' || (s[end - 1] >= '\t' && s[end - 1] <= '\r'))) end--;
    if (start == end) return true;
    char *part = malloc(end - start + 1);
    if (!part) return true;
    memcpy(part, s + start, end - start);
    part[end - start] = 0;
    const bool found = strstr(text, part) != NULL;
    free(part);
    return found;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const int add_assistant = data[0] & 1;
    /* the fields, NUL-terminated in a copy */
    char *copy = malloc(size);
    if (!copy) return 0;
    memcpy(copy, data + 1, size - 1);
    copy[size - 1] = 0;
    const char *field[1 + 2 * MAX_MESSAGES];
    size_t n_fields = 0;
    for (size_t at = 0; at < size && n_fields < sizeof field / sizeof field[0];) {
        field[n_fields++] = copy + at;
        at += strlen(copy + at) + 1;
    }
    static const char *const roles[3] = {"system", "user", "assistant"};
    sift_chat_message msgs[MAX_MESSAGES];
    size_t n = 0;
    for (size_t i = 1; i + 1 < n_fields; i += 2, n++) {
        const char *role = field[i];
        msgs[n].role = strlen(role) == 1 ? roles[(unsigned char)role[0] % 3] : role;
        msgs[n].content = field[i + 1];
    }
    const char *tmpl = field[0];

    const char *name = sift_chat_template_name(tmpl);
    if (name && (!is_known(name) || sift_chat_template_name(name) != name)) __builtin_trap();
    size_t len = 0;
    const sift_status sized = sift_chat_format(tmpl, msgs, n, add_assistant, NULL, 0, &len);
    if (sized == SIFT_OK || sift_last_error()[0] == 0) __builtin_trap(); /* no room for the NUL: refused, with a reason */
    if (!name) {
        if (len != 0) __builtin_trap();
        free(copy);
        return 0;
    }
    char *text = malloc(len + 1);
    if (!text) {
        free(copy);
        return 0;
    }
    size_t len2 = 0;
    if (sift_chat_format(tmpl, msgs, n, add_assistant, text, len + 1, &len2) != SIFT_OK || len2 != len || text[len] != 0 ||
        strlen(text) != len)
        __builtin_trap();
    for (size_t i = 0; i < n; i++)
        if (!contains_trimmed(text, msgs[i].content)) __builtin_trap();
    /* a buffer of half the size: refused, the start of the text in it, nothing written past it (ASan) */
    const size_t half = (len + 1) / 2;
    char *small = malloc(half ? half : 1);
    if (small) {
        size_t len3 = 0;
        if (sift_chat_format(tmpl, msgs, n, add_assistant, small, half, &len3) == SIFT_OK || len3 != len ||
            memcmp(small, text, half) != 0)
            __builtin_trap();
        free(small);
    }
    free(text);
    free(copy);
    return 0;
}
