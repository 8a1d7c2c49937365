// Default sanitizer options of every fuzzer, so that a fuzzer run by hand behaves as in
// `make fuzz`: undefined behaviour stops the run with a stack, except the reports listed
// in ubsan.supp (only float-cast-overflow is built recoverable, see CMakeLists.txt).
extern "C" const char* __ubsan_default_options() {
  return "halt_on_error=1:print_stacktrace=1:suppressions=" RAIO_FUZZ_UBSAN_SUPPRESSIONS;
}
