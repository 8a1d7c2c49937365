// FunctionRegistry: remote functions registered by RAIO_REMOTE in this executable,
// by name (for the executor) and by address (for raio::Task).
// Threading: registration happens during static initialization; lookups afterwards are
// read-only and thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "raio/remote.h"

namespace raio::worker {

using InvokerFn = internal::Invoker;

struct RegisteredFunction {
  std::string name;
  const void* key = nullptr;
  InvokerFn invoker = nullptr;
};

// nullptr when no function has that name.
const RegisteredFunction* FindFunctionByName(const std::string& name);

struct RegisteredFactory {
  std::string name;
  const void* key = nullptr;
  std::string class_name;
  internal::FactoryInvoker invoker = nullptr;
};
struct RegisteredMethod {
  std::string name;
  const void* key = nullptr;
  internal::MethodInvoker invoker = nullptr;
};
const RegisteredFactory* FindFactoryByName(const std::string& name);
// Every name that RAIO_REMOTE registered twice in this executable, one message each
// naming both sites (also printed to stderr when found); raio::Init refuses to start
// while there is any.
std::vector<std::string> RegistrationConflicts();
const RegisteredMethod* FindMethodByName(const std::string& name);

}  // namespace raio::worker
