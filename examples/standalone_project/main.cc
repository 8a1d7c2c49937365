// A standalone program built against an installed raio: one remote task, one Put.
// Prints "standalone_project: result=42" and exits 0.
#include <raio/raio.h>

#include <iostream>
#include <numeric>
#include <vector>

int Multiply(int a, int b) { return a * b; }

int Sum(std::vector<int> values) { return std::accumulate(values.begin(), values.end(), 0); }

RAIO_REMOTE(Multiply, Sum);

int main(int argc, char** argv) {
  // The cluster runs tasks by re-executing this binary as a worker; Init never returns
  // there, so it comes first.
  raio::Init(argc, argv);

  int product = raio::Task(Multiply).Remote(6, 5).Get();       // 30
  auto extra = raio::Put(std::vector<int>{2, 4, 6});           // sums to 12
  int result = product + raio::Task(Sum).Remote(extra).Get();  // 42
  std::cout << "standalone_project: result=" << result << std::endl;

  raio::Shutdown();
  return result == 42 ? 0 : 1;
}
