/* The CPU backend's e^x (cpu_exp, backends/cpu/cpu_ops.h) against exp() in double: every 61st
 * float of [-110, 89] within 0.504 ulp of the exact value, and the edges (zero, the underflow to
 * subnormals and to 0, the overflow, +-inf, NaN) exactly as libm's expf gives them. */
#include "cpu_ops.h"
#include "report.h"

#include <math.h>
#include <stdio.h>

/* |y - e^x| in ulps of the float nearest e^x (subnormal ulps below 2^-126). */
static double ulp_error(float x, float y)
{
    const double exact = exp((double)x);
    const float nearest = (float)exact;
    const double ulp = fabsf(nearest) < 0x1p-126f ? 0x1p-149 : ldexp(1.0, ilogbf(nearest) - 23);
    return fabs((double)y - exact) / ulp;
}

int main(void)
{
    enum { BATCH = 4096 };
    static float x[BATCH], y[BATCH];
    double worst = 0.0;
    float worst_x = 0.0f;
    long n = 0, differ = 0;
    test_case_begin("sweep", "cpu");
    int fill = 0;
    /* the bit patterns of the floats in [-110, 89], in steps of 61, a batch at a time */
    for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 61) {
        const uint32_t b = (uint32_t)bits;
        float v;
        memcpy(&v, &b, sizeof v);
        if (v >= -110.0f && v <= 89.0f) x[fill++] = v;
        if (fill == BATCH || (bits + 61 > 0xffffffffu && fill > 0)) {
            cpu_exp(x, y, fill);
            for (int i = 0; i < fill; i++) {
                const float libm = expf(x[i]);
                differ += y[i] != libm;
                n++;
                if (isinf(libm) || libm == 0.0f) { /* overflow, or below half the smallest subnormal */
                    if (y[i] != libm) worst = INFINITY, worst_x = x[i];
                    continue;
                }
                const double e = ulp_error(x[i], y[i]);
                if (e > worst) worst = e, worst_x = x[i];
            }
            fill = 0;
        }
    }
    char what[128];
    snprintf(what, sizeof what, "max error over %ld floats in [-110, 89] (ulp; at %a)", n, (double)worst_x);
    report(what, "cpu", "ulp", worst, 0.504, worst <= 0.504);
    test_note("cpu", "(%ld of them differ from libm's expf by an ulp)", differ);

    const float edge[] = {0.0f, -0.0f, 1.0f, -1.0f, 88.72283f, 88.7229f, 89.0f, 100.0f, 1e30f, -87.33654f, -87.4f,
                          -100.0f, -103.97207f, -103.98f, -104.0f, -110.0f, -1e30f, INFINITY, -INFINITY, NAN, -NAN};
    const int n_edge = (int)(sizeof edge / sizeof edge[0]);
    float got[sizeof edge / sizeof edge[0]];
    cpu_exp(edge, got, n_edge);
    for (int i = 0; i < n_edge; i++) {
        const float libm = expf(edge[i]);
        const bool same = isnan(libm) ? isnan(got[i]) : got[i] == libm || ulp_error(edge[i], got[i]) <= 0.504;
        snprintf(what, sizeof what, "e^%a = %a (libm: %a)", (double)edge[i], (double)got[i], (double)libm);
        report(what, "cpu", "ulp", isnan(libm) || isinf(libm) || libm == 0.0f ? 0.0 : ulp_error(edge[i], got[i]), 0.504, same);
    }
    return test_summary("cpu-exp", "cpu");
}
