// Exact-angle trigonometry shared by rope.comp and attend.comp (rotated keys, SPEC §6), and an
// error-free product for correctly rounded quotients (rope.comp, mean_rows.comp).
//
// sin and cos are computed here, not by the GPU's sin/cos (whose error grows with the argument):
// theta - k * pi/2 is formed with an error-free product (Dekker's: fma is not fused on every driver,
// lavapipe's included), then minimax polynomials on [-pi/4, pi/4] give about 1 ulp (checked against
// glibc up to theta = 1e6).

// a * b = p + e exactly (Dekker's product: plain multiplies and adds, none contracted)
void two_prod(float a, float b, out float p, out float e)
{
    precise float t = 4097.0 * a;
    precise float ah = t - (t - a);
    precise float al = a - ah;
    precise float u = 4097.0 * b;
    precise float bh = u - (u - b);
    precise float bl = b - bh;
    precise float pp = a * b;
    precise float ee = ((ah * bh - pp) + ah * bl + al * bh) + al * bl;
    p = pp;
    e = ee;
}

void sincos_accurate(float theta, out float s, out float c)
{
    precise float k = roundEven(theta * 0.636619772367581343);
    float p, e;
    two_prod(k, 1.57079637050628662109375, p, e); // pi/2 = this + -4.371139e-8 + -1.715125e-15
    precise float r = (theta - p) - e;
    r = r - k * -4.37113882867379300296e-8;
    r = r - k * -1.71512451000588190e-15;
    precise float z = r * r;
    precise float sr = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
    precise float cr = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z - 0.5 * z + 1.0;
    const uint q = uint(int(k)) & 3u;
    s = q == 0u ? sr : q == 1u ? cr : q == 2u ? -sr : -cr;
    c = q == 0u ? cr : q == 1u ? -sr : q == 2u ? -cr : sr;
}
