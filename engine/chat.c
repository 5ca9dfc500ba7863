/* Chat templates: a conversation's messages written as the prompt text a chat model was trained on.
 *
 * A model file carries its template as Jinja source (tokenizer.chat_template). sift runs no Jinja:
 * like llama.cpp's built-in templates, it recognises the formats it knows by markers only they
 * contain, and writes each format in C. The text spells special tokens out ("<|im_start|>"), to
 * be tokenized with special tokens parsed; BOS is the tokenizer's (add_bos), never written here. */
#include "sift.h"

#include "backend.h"

#include <stdbool.h>
#include <string.h>

typedef enum chat_format {
    CHAT_UNKNOWN = 0,
    CHAT_CHATML,
    CHAT_LLAMA3,
    CHAT_LLAMA2,           /* [INST] ... [/INST]; a system message is the first user message's first line */
    CHAT_LLAMA2_SYS,       /* the system message inside <<SYS>> ... <</SYS>> */
    CHAT_LLAMA2_SYS_BOS,   /* and every later turn opens with <s> */
    CHAT_LLAMA2_SYS_STRIP, /* and every message is trimmed (Llama 2 chat's own template) */
    CHAT_FORMAT_COUNT
} chat_format;

static const char *const format_names[CHAT_FORMAT_COUNT] = {
    NULL, "chatml", "llama3", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip"};

static bool contains(const char *s, const char *marker) { return strstr(s, marker) != NULL; }

/* The format a template name or source gives; the order of the checks is llama.cpp's, and the
 * formats that share a marker with one sift writes but differ from it (Phi-4 and SmolVLM use
 * <|im_start|>, Mistral's templates [INST]) are refused rather than written wrong. */
static chat_format detect(const char *tmpl)
{
    for (int f = 1; f < CHAT_FORMAT_COUNT; f++)
        if (!strcmp(tmpl, format_names[f])) return (chat_format)f;
    if (contains(tmpl, "<|im_start|>"))
        return contains(tmpl, "<|im_sep|>") || contains(tmpl, "<end_of_utterance>") ? CHAT_UNKNOWN : CHAT_CHATML;
    if (!strncmp(tmpl, "mistral", 7) || contains(tmpl, "[INST]")) {
        if (!strncmp(tmpl, "mistral", 7) || contains(tmpl, "[SYSTEM_PROMPT]") ||
            contains(tmpl, "' [INST] ' + system_message") || contains(tmpl, "[AVAILABLE_TOOLS]"))
            return CHAT_UNKNOWN;
        if (contains(tmpl, "content.strip()")) return CHAT_LLAMA2_SYS_STRIP;
        if (contains(tmpl, "bos_token + '[INST]")) return CHAT_LLAMA2_SYS_BOS;
        return contains(tmpl, "<<SYS>>") ? CHAT_LLAMA2_SYS : CHAT_LLAMA2;
    }
    if (contains(tmpl, "<|start_header_id|>") && contains(tmpl, "<|end_header_id|>")) return CHAT_LLAMA3;
    return CHAT_UNKNOWN;
}

const char *sift_chat_template_name(const char *tmpl) { return tmpl ? format_names[detect(tmpl)] : NULL; }

/* Where the text goes: written while it fits, all counted. */
typedef struct text_out {
    char *buf;
    size_t cap, len;
} text_out;

static void put_bytes(text_out *o, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++, o->len++)
        if (o->len < o->cap) o->buf[o->len] = s[i];
}

static void put(text_out *o, const char *s) { put_bytes(o, s, strlen(s)); }

static bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* s without the white space at either end (Jinja's trim, Python's strip), as Llama 3 writes it. */
static void put_trimmed(text_out *o, const char *s)
{
    size_t start = 0, end = strlen(s);
    while (start < end && is_ascii_space(s[start])) start++;
    while (end > start && is_ascii_space(s[end - 1])) end--;
    put_bytes(o, s + start, end - start);
}

static void put_content(text_out *o, const char *s, bool strip)
{
    if (strip) put_trimmed(o, s);
    else put(o, s);
}

static void write_llama2(chat_format f, const sift_chat_message *msgs, size_t n, text_out *o)
{
    const bool system_tags = f != CHAT_LLAMA2, bos_inside = f == CHAT_LLAMA2_SYS_BOS, strip = f == CHAT_LLAMA2_SYS_STRIP;
    bool inside_turn = true; /* the first turn's <s> is the tokenizer's BOS */
    put(o, "[INST] ");
    for (size_t i = 0; i < n; i++) {
        if (!inside_turn) {
            inside_turn = true;
            put(o, bos_inside ? "<s>[INST] " : "[INST] ");
        }
        const char *role = msgs[i].role;
        if (!strcmp(role, "system")) {
            put(o, system_tags ? "<<SYS>>\n" : "");
            put_content(o, msgs[i].content, strip);
            put(o, system_tags ? "\n<</SYS>>\n\n" : "\n");
        } else if (!strcmp(role, "user")) {
            put_content(o, msgs[i].content, strip);
            put(o, " [/INST]");
        } else {
            put_content(o, msgs[i].content, strip);
            put(o, "</s>");
            inside_turn = false;
        }
    }
}

sift_status sift_chat_format(const char *tmpl, const sift_chat_message *msgs, size_t n, int add_assistant, char *buf,
                             size_t cap, size_t *len)
{
    if (!tmpl || (!msgs && n) || (!buf && cap) || !len) return sift_set_error(SIFT_E_INVALID, "sift_chat_format: null argument");
    *len = 0;
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return sift_set_error(SIFT_E_INVALID, "sift_chat_format: message %zu has no %s", i, msgs[i].role ? "content" : "role");
    const chat_format f = detect(tmpl);
    if (f == CHAT_UNKNOWN)
        return sift_set_error(SIFT_E_INVALID, "sift_chat_format: '%.40s%s' is no chat template sift knows (chatml, llama3, "
                              "llama2, llama2-sys, llama2-sys-bos, llama2-sys-strip, or a template with their markers)",
                              tmpl, strlen(tmpl) > 40 ? "..." : "");
    text_out o = {buf, cap, 0};
    if (f == CHAT_CHATML) {
        for (size_t i = 0; i < n; i++) {
            put(&o, "<|im_start|>");
            put(&o, msgs[i].role);
            put(&o, "\n");
            put(&o, msgs[i].content);
            put(&o, "<|im_end|>\n");
        }
        if (add_assistant) put(&o, "<|im_start|>assistant\n");
    } else if (f == CHAT_LLAMA3) {
        for (size_t i = 0; i < n; i++) {
            put(&o, "<|start_header_id|>");
            put(&o, msgs[i].role);
            put(&o, "<|end_header_id|>\n\n");
            put_trimmed(&o, msgs[i].content);
            put(&o, "<|eot_id|>");
        }
        if (add_assistant) put(&o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    } else {
        write_llama2(f, msgs, n, &o); /* the reply follows [/INST] directly: nothing to add */
    }
    *len = o.len;
    if (o.len >= cap)
        return sift_set_error(SIFT_E_INVALID, "sift_chat_format: %zu bytes and a NUL do not fit a buffer of %zu", o.len, cap);
    buf[o.len] = 0;
    return SIFT_OK;
}
