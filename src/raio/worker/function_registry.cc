#include "raio/worker/function_registry.h"

#include <map>
#include <mutex>

#include "raio/actor.h"
#include "raio/common/process.h"
#include "raio/errors.h"
#include "raio/remote.h"

namespace raio::worker {
namespace {
struct Registry {
  std::mutex mu;
  std::map<std::string, RegisteredFunction> by_name;
  std::map<const void*, std::string> by_key;
  std::map<std::string, RegisteredFactory> factories;
  std::map<const void*, std::string> factory_by_key;
  std::map<std::string, RegisteredMethod> methods;
};
Registry& GetRegistry() {
  static Registry* r = new Registry();  // never destroyed: used during static init/exit
  return *r;
}
}  // namespace

const RegisteredFunction* FindFunctionByName(const std::string& name) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_name.find(name);
  return it == r.by_name.end() ? nullptr : &it->second;
}

const RegisteredFactory* FindFactoryByName(const std::string& name) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.factories.find(name);
  return it == r.factories.end() ? nullptr : &it->second;
}

const RegisteredMethod* FindMethodByName(const std::string& name) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.methods.find(name);
  return it == r.methods.end() ? nullptr : &it->second;
}

}  // namespace raio::worker

namespace raio::internal {

void RegisterFactoryWithInvoker(const std::string& name, const void* key,
                                const std::string& class_name, FactoryInvoker invoker) {
  auto& r = worker::GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.factory_by_key.emplace(key, name);
  r.factories.emplace(name, worker::RegisteredFactory{name, key, class_name, invoker});
}

void RegisterMethodWithInvoker(const std::string& name, const void* key, MethodInvoker invoker) {
  auto& r = worker::GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.methods.emplace(name, worker::RegisteredMethod{name, key, invoker});
}

std::string DemangledTypeName(const std::type_info& type) { return Demangle(type.name()); }

const std::string& ResolveFactoryName(const void* key) {
  auto& r = worker::GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.factory_by_key.find(key);
  if (it == r.factory_by_key.end()) {
    throw InvalidUsageError(
        "raio::Actor: this factory is not registered; add RAIO_REMOTE(Class::Create, "
        "&Class::Method, ...) at namespace scope");
  }
  return it->second;
}

void RegisterFunctionWithInvoker(const std::string& name, const void* key, Invoker invoker) {
  auto& r = worker::GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.by_key.emplace(key, name);
  // A second function under a taken name keeps the first; submitting the second is
  // refused by ResolveFunctionName.
  r.by_name.emplace(name, worker::RegisteredFunction{name, key, invoker});
}

const std::string& ResolveFunctionName(const void* key) {
  auto& r = worker::GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_key.find(key);
  if (it == r.by_key.end()) {
    throw InvalidUsageError(
        "raio::Task: this function is not registered; add RAIO_REMOTE(<function>) at "
        "namespace scope");
  }
  auto named = r.by_name.find(it->second);
  if (named == r.by_name.end() || named->second.key != key) {
    throw InvalidUsageError("raio::Task: two remote functions are registered under the name '" +
                            it->second +
                            "' (e.g. the same name in two namespaces); register them with "
                            "qualified names, e.g. RAIO_REMOTE(ns::" +
                            it->second + ") at global scope");
  }
  return it->second;
}

std::vector<std::string> SplitMacroList(std::string_view text) {
  std::vector<std::string> out;
  int depth = 0;
  std::string cur;
  for (char c : text) {
    if (c == '(' || c == '<') ++depth;
    if (c == ')' || c == '>') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
      continue;
    }
    cur.push_back(c);
  }
  out.push_back(cur);
  return out;
}

std::string FunctionNameFromMacroText(std::string_view text) {
  std::string s;
  for (char c : text) {
    if (c != ' ' && c != '\t' && c != '\n') s.push_back(c);
  }
  if (!s.empty() && s[0] == '&') s.erase(0, 1);
  constexpr std::string_view kFunc = "RAIO_FUNC(";
  if (s.rfind(kFunc, 0) == 0 && s.back() == ')') {
    std::string inner = s.substr(kFunc.size(), s.size() - kFunc.size() - 1);
    auto comma = inner.find(',');
    if (comma == std::string::npos) return inner + "()";
    return inner.substr(0, comma) + "(" + inner.substr(comma + 1) + ")";
  }
  return s;
}

}  // namespace raio::internal
