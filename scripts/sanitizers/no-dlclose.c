/* Preloaded into the mpi suites' processes under scripts/test --full: dlclose does nothing, so
 * the Open MPI components (MCA plugins) stay mapped until exit and LeakSanitizer can name the
 * library behind their process-lifetime allocations, which openmpi-lsan.supp then suppresses.
 * Without it those frames print as "<unknown module>" and match no suppression (Open MPI 4.1
 * has no switch to keep its components loaded). Unloading a library at exit changes nothing a
 * test checks. */
int dlclose(void* handle) {
  (void)handle;
  return 0;
}
