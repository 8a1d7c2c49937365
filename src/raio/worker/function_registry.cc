#include "raio/worker/function_registry.h"

#include <cstdio>
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
  // Where each name was first registered ("file:line"), and the duplicates found.
  std::map<std::string, std::string> where;
  std::vector<std::string> conflicts;
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
// Records that `name` (a function, factory or method: `kind`) is registered at `site`;
// a second registration of the name is a conflict. Caller holds r.mu.
void NoteSiteLocked(Registry& r, const std::string& kind, const std::string& name,
                    const std::string& site) {
  auto [it, fresh] = r.where.emplace(name, site);
  if (fresh) return;
  std::string message = "RAIO_REMOTE registers the " + kind + " name '" + name + "' twice (at " +
                        it->second + " and at " + site +
                        "); remote names must be unique in an executable: register each "
                        "once, and give same-named functions of different namespaces their "
                        "qualified names (RAIO_REMOTE(ns::F) at global scope)";
  std::fprintf(stderr, "raio: %s\n", message.c_str());
  r.conflicts.push_back(std::move(message));
}

}  // namespace

std::vector<std::string> RegistrationConflicts() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.conflicts;
}

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
                                const std::string& class_name, FactoryInvoker invoker,
                                const std::string& site) {
  auto& r = worker::GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  worker::NoteSiteLocked(r, "actor factory", name, site);
  r.factory_by_key.emplace(key, name);
  r.factories.emplace(name, worker::RegisteredFactory{name, key, class_name, invoker});
}

void RegisterMethodWithInvoker(const std::string& name, const void* key, MethodInvoker invoker,
                               const std::string& site) {
  auto& r = worker::GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  worker::NoteSiteLocked(r, "actor method", name, site);
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

void RegisterFunctionWithInvoker(const std::string& name, const void* key, Invoker invoker,
                                 const std::string& site) {
  auto& r = worker::GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  worker::NoteSiteLocked(r, "function", name, site);
  r.by_key.emplace(key, name);
  // A second function under a taken name keeps the first (raio::Init refuses to start,
  // see RegistrationConflicts); submitting the second is refused by ResolveFunctionName.
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
    std::string fn = inner.substr(0, comma);
    if (!fn.empty() && fn[0] == '&') fn.erase(0, 1);
    if (comma == std::string::npos) return fn + "()";
    return fn + "(" + inner.substr(comma + 1) + ")";
  }
  return s;
}

}  // namespace raio::internal
