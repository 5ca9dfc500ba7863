/* SVG line charts for the command line: see plot.h. */
#include "plot.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *name;
    double *x, *y;
    int n, cap;
} series;

struct plot {
    char *title, *x_label, *y_label;
    bool log_x, log_y;
    series *s;
    int n, cap;
};

/* The chart's geometry in SVG units: the plotting area and the legend to its right. */
enum { WIDTH = 760, HEIGHT = 440, LEFT = 72, RIGHT = 200, TOP = 44, BOTTOM = 56, MAX_TICKS = 64 };

/* Colours that stay apart from one another (and print in grey distinguishably enough). */
static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define N_COLOURS (sizeof palette / sizeof palette[0])

static char *copy(const char *s)
{
    const size_t n = strlen(s ? s : "") + 1;
    char *c = malloc(n);
    if (c) memcpy(c, s ? s : "", n);
    return c;
}

plot *plot_new(const char *title, const char *x_label, const char *y_label, bool log_x, bool log_y)
{
    plot *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->title = copy(title);
    p->x_label = copy(x_label);
    p->y_label = copy(y_label);
    p->log_x = log_x;
    p->log_y = log_y;
    if (!p->title || !p->x_label || !p->y_label) {
        plot_free(p);
        return NULL;
    }
    return p;
}

void plot_free(plot *p)
{
    if (!p) return;
    for (int i = 0; i < p->n; i++) {
        free(p->s[i].name);
        free(p->s[i].x);
        free(p->s[i].y);
    }
    free(p->s);
    free(p->title);
    free(p->x_label);
    free(p->y_label);
    free(p);
}

bool plot_add(plot *p, const char *name, double x, double y)
{
    if (!isfinite(x) || !isfinite(y)) return true;
    int i = 0;
    while (i < p->n && strcmp(p->s[i].name, name) != 0) i++;
    if (i == p->n) {
        if (p->n == p->cap) {
            const int cap = p->cap ? 2 * p->cap : 8;
            series *s = realloc(p->s, (size_t)cap * sizeof *s);
            if (!s) return false;
            p->s = s;
            p->cap = cap;
        }
        series *s = &p->s[p->n];
        memset(s, 0, sizeof *s);
        if (!(s->name = copy(name))) return false;
        p->n++;
    }
    series *s = &p->s[i];
    if (s->n == s->cap) {
        const int cap = s->cap ? 2 * s->cap : 16;
        double *nx = realloc(s->x, (size_t)cap * sizeof *nx);
        if (!nx) return false;
        s->x = nx;
        double *ny = realloc(s->y, (size_t)cap * sizeof *ny);
        if (!ny) return false;
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->n++;
    return true;
}

/* One axis: the data's range widened to its ticks, and the map from a value to [0, 1]. */
typedef struct {
    bool log;
    double lo, hi; /* in axis units: the value, or its log10 */
    double ticks[MAX_TICKS];
    int n_ticks;
} axis;

static double axis_unit(const axis *a, double v) { return a->log ? log10(v) : v; }
static double axis_frac(const axis *a, double v) { return (axis_unit(a, v) - a->lo) / (a->hi - a->lo); }

/* Ticks at 1, 2 or 5 times a power of ten (linear), or at powers of 2 or of 10 (logarithmic:
 * 2 while the range spans at most 2^10), covering [min, max]. */
static void axis_fit(axis *a, bool logarithmic, double min, double max)
{
    a->log = logarithmic;
    a->n_ticks = 0;
    if (logarithmic) {
        const double base = max / min <= 1024.0 ? 2.0 : 10.0;
        double t = pow(base, floor(log(min) / log(base) + 1e-9));
        const double top = pow(base, ceil(log(max) / log(base) - 1e-9));
        if (top <= t) { /* one value: a power below and above */
            a->ticks[a->n_ticks++] = t / base;
            a->ticks[a->n_ticks++] = t;
            a->ticks[a->n_ticks++] = t * base;
        } else
            for (; t <= top * 1.000001 && a->n_ticks < MAX_TICKS; t *= base) a->ticks[a->n_ticks++] = t;
        a->lo = log10(a->ticks[0]);
        a->hi = log10(a->ticks[a->n_ticks - 1]);
        return;
    }
    if (max - min < 1e-12 * (fabs(max) + 1.0)) { /* one value: a unit around it */
        const double pad = fabs(max) > 0 ? fabs(max) * 0.5 : 1.0;
        min -= pad;
        max += pad;
    }
    const double raw = (max - min) / 6.0, mag = pow(10.0, floor(log10(raw)));
    const double step = raw / mag <= 1.0 ? mag : raw / mag <= 2.0 ? 2.0 * mag : raw / mag <= 5.0 ? 5.0 * mag : 10.0 * mag;
    const double first = floor(min / step + 1e-9) * step, last = ceil(max / step - 1e-9) * step;
    for (double t = first; t <= last + step * 0.5 && a->n_ticks < MAX_TICKS; t += step)
        a->ticks[a->n_ticks++] = fabs(t) < step * 1e-9 ? 0.0 : t;
    a->lo = a->ticks[0];
    a->hi = a->ticks[a->n_ticks - 1];
}

/* Text with XML's special characters escaped. */
static void put_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '&') fputs("&amp;", f);
        else if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

/* A tick's label: whole numbers as they are (1024, 32768), others in %g. */
static void tick_label(char *buf, size_t len, double v)
{
    if (fabs(v) < 1e15 && v == floor(v)) snprintf(buf, len, "%.0f", v);
    else snprintf(buf, len, "%g", v);
}

static bool point_shown(const plot *p, double x, double y) { return (!p->log_x || x > 0) && (!p->log_y || y > 0); }

bool plot_write_svg(const plot *p, const char *path)
{
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int i = 0; i < p->n; i++)
        for (int j = 0; j < p->s[i].n; j++) {
            const double x = p->s[i].x[j], y = p->s[i].y[j];
            if (!point_shown(p, x, y)) continue;
            xmin = fmin(xmin, x), xmax = fmax(xmax, x), ymin = fmin(ymin, y), ymax = fmax(ymax, y);
        }
    if (xmin > xmax) { /* no point to show: empty axes over [1, 10] */
        xmin = ymin = 1.0;
        xmax = ymax = 10.0;
    }
    axis ax, ay;
    axis_fit(&ax, p->log_x, xmin, xmax);
    axis_fit(&ay, p->log_y, ymin, ymax);
    FILE *f = fopen(path, "w");
    if (!f) return false;
    const double pw = WIDTH - LEFT - RIGHT, ph = HEIGHT - TOP - BOTTOM;
#define PX(v) (LEFT + pw * axis_frac(&ax, (v)))
#define PY(v) (TOP + ph * (1.0 - axis_frac(&ay, (v))))
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", WIDTH, HEIGHT, WIDTH, HEIGHT);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", WIDTH, HEIGHT);
    fprintf(f, "<text x=\"%d\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">", LEFT + (int)pw / 2);
    put_text(f, p->title);
    fputs("</text>\n", f);
    /* grid lines and tick labels */
    char label[32];
    for (int i = 0; i < ax.n_ticks; i++) {
        const double x = PX(ax.ticks[i]);
        tick_label(label, sizeof label, ax.ticks[i]);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n", x, TOP, x, TOP + ph);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x, TOP + ph + 18, label);
    }
    for (int i = 0; i < ay.n_ticks; i++) {
        const double y = PY(ay.ticks[i]);
        tick_label(label, sizeof label, ay.ticks[i]);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n", LEFT, y, LEFT + pw, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", LEFT - 6, y + 4, label);
    }
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"black\"/>\n", LEFT, TOP, pw, ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">", LEFT + pw / 2, HEIGHT - 14);
    put_text(f, p->x_label);
    fprintf(f, "%s</text>\n", p->log_x ? " (log scale)" : "");
    fprintf(f, "<text transform=\"translate(18 %.1f) rotate(-90)\" text-anchor=\"middle\">", TOP + ph / 2);
    put_text(f, p->y_label);
    fprintf(f, "%s</text>\n", p->log_y ? " (log scale)" : "");
    /* one polyline per series, a dot per point, and the legend */
    for (int i = 0; i < p->n; i++) {
        const series *s = &p->s[i];
        const char *colour = palette[(size_t)i % N_COLOURS];
        /* every other line dashed, so that one drawn over another (equal results) leaves it visible */
        const char *dash = i % 2 ? " stroke-dasharray=\"7 4\"" : "";
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", colour, dash);
        for (int j = 0, first = 1; j < s->n; j++)
            if (point_shown(p, s->x[j], s->y[j])) {
                fprintf(f, "%s%.1f,%.1f", first ? "" : " ", PX(s->x[j]), PY(s->y[j]));
                first = 0;
            }
        fputs("\"/>\n", f);
        for (int j = 0; j < s->n; j++)
            if (point_shown(p, s->x[j], s->y[j]))
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", PX(s->x[j]), PY(s->y[j]), colour);
        const double ly = TOP + 10 + 20.0 * i;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>\n", LEFT + pw + 14,
                ly, LEFT + pw + 40, ly, colour, dash);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", LEFT + pw + 46, ly + 4);
        put_text(f, s->name);
        fputs("</text>\n", f);
    }
#undef PX
#undef PY
    fputs("</svg>\n", f);
    const bool ok = !ferror(f);
    if (fclose(f) != 0 || !ok) {
        if (!errno) errno = EIO;
        return false;
    }
    return true;
}
