/* Line charts written as SVG by the command line (`sift eval --plot`, `sift bench-attn --plot`):
 * named series of (x, y) points, linear or logarithmic axes with ticks, a legend; one <polyline>
 * per series. Plain C, no dependency. */
#ifndef SIFT_TOOLS_PLOT_H
#define SIFT_TOOLS_PLOT_H

#include <stdbool.h>

typedef struct plot plot;

/* A chart with its title and axis labels (copied); log_x / log_y: logarithmic axes, where points
 * with a coordinate <= 0 are left out. NULL when out of memory. */
plot *plot_new(const char *title, const char *x_label, const char *y_label, bool log_x, bool log_y);
void plot_free(plot *p);
/* Appends (x, y) to the series named `series`, made at its first point (series keep the order in
 * which they first appear). Points that are not finite are left out. false when out of memory. */
bool plot_add(plot *p, const char *series, double x, double y);
/* Writes the chart to path; false (errno set) when the file cannot be written. */
bool plot_write_svg(const plot *p, const char *path);

#endif
