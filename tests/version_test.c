/* The shared library against its header and the build: sift_version() (linked from libsift.so)
 * must be SIFT_VERSION_STRING, the string must be SIFT_VERSION_MAJOR.MINOR.PATCH, and both must be
 * the project version Meson builds (argv[1]). */
#include <sift.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: sift-version-test PROJECT_VERSION\n");
        return 2;
    }
    char composed[64];
    snprintf(composed, sizeof composed, "%d.%d.%d", SIFT_VERSION_MAJOR, SIFT_VERSION_MINOR, SIFT_VERSION_PATCH);
    int fails = 0;
    if (strcmp(sift_version(), SIFT_VERSION_STRING)) fails++, printf("FAIL: sift_version() %s, header %s\n", sift_version(), SIFT_VERSION_STRING);
    if (strcmp(composed, SIFT_VERSION_STRING)) fails++, printf("FAIL: the macros give %s, the string is %s\n", composed, SIFT_VERSION_STRING);
    if (strcmp(argv[1], SIFT_VERSION_STRING)) fails++, printf("FAIL: meson builds %s, the header says %s\n", argv[1], SIFT_VERSION_STRING);
    printf("summary: 3 checks, %d failures (sift %s)\n", fails, sift_version());
    return fails ? 1 : 0;
}
