// Compiled by ctest: with RAIO_COMPILE_OK it must compile; without, the wrong argument
// type must be rejected by TaskCaller::Remote's static_assert.
#include <raio/raio.h>

#include <string>
#include <vector>

int Twice(int x) { return 2 * x; }
int Total(std::vector<int> xs) { return static_cast<int>(xs.size()); }

void Submit() {
#ifdef RAIO_COMPILE_OK
  raio::Task(Twice).Remote(1);
  raio::Task(Twice).Remote(raio::ObjectRef<int>());
  raio::Task(Total).Remote(std::vector<raio::ObjectRef<int>>{});
  raio::Task(Total).Remote(std::vector<int>{1, 2});
#else
  raio::Task(Twice).Remote(std::string("not an int"));
#endif
}
