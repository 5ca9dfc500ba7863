#include "registry.h"
void cases_perf(const suite_options *o) { (void)o; }
