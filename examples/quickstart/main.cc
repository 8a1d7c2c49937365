// Quick start: remote tasks, ObjectRef arguments, nested tasks, Wait and errors on the
// embedded cluster (or on RAIO_ADDRESS when it is set).
#include <raio/raio.h>

#include <chrono>
#include <iostream>
#include <numeric>
#include <stdexcept>
#include <vector>

int Square(int x) { return x * x; }

int Sum(std::vector<int> values) { return std::accumulate(values.begin(), values.end(), 0); }

// A task that submits tasks itself and waits for them.
int SumOfSquares(int n) {
  std::vector<raio::ObjectRef<int>> refs;
  for (int i = 1; i <= n; ++i) refs.push_back(raio::Task(Square).Remote(i));
  return raio::Task(Sum).Remote(refs).Get();
}

double Divide(double a, double b) {
  if (b == 0) throw std::invalid_argument("division by zero");
  return a / b;
}

RAIO_REMOTE(Square, Sum, SumOfSquares, Divide);

int main(int argc, char** argv) {
  raio::Init(argc, argv);  // workers re-run this binary and never get past this line
  auto t0 = std::chrono::steady_clock::now();

  std::vector<raio::ObjectRef<int>> squares;
  for (int i = 0; i < 10; ++i) squares.push_back(raio::Task(Square).Remote(i));
  std::cout << "squares:";
  for (int v : raio::Get(squares)) std::cout << " " << v;
  std::cout << "\n";

  std::cout << "sum of squares 1..100 (nested tasks): "
            << raio::Task(SumOfSquares).Remote(100).Get() << "\n";

  auto data = raio::Put(std::vector<int>{1, 2, 3, 4});
  std::cout << "sum of a Put vector: " << raio::Task(Sum).Remote(data).Get() << "\n";

  auto [ready, pending] = raio::Wait(squares, 5, std::chrono::seconds(1));
  std::cout << "wait: " << ready.size() << " ready, " << pending.size() << " pending\n";

  try {
    raio::Task(Divide).Remote(1.0, 0.0).Get();
  } catch (const raio::TaskError& e) {
    std::cout << "remote error: " << e.exception_type() << ": " << e.message() << "\n";
  }
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  std::cout << "done in " << ms << " ms\n";
  raio::Shutdown();
  return 0;
}
