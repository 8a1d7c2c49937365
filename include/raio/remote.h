// Registration of remote functions.
//
//   int Add(int a, int b) { return a + b; }
//   int Scale(int x);  double Scale(double x);        // overloads
//   RAIO_REMOTE(Add, RAIO_FUNC(Scale, int), RAIO_FUNC(Scale, double));
//
// RAIO_REMOTE runs at static-initialization time in the driver and in every worker (the
// same executable), so both sides agree on the names: "Add", "Scale(int)",
// "Scale(double)". Place it at namespace scope in a .cc file.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "raio/export.h"
#include "raio/internal/returns.h"
#include "raio/internal/runtime.h"
#include "raio/serialization.h"

namespace raio {
namespace internal {

// Picks one overload of `f` by its exact parameter types (RAIO_FUNC). The parameter pack
// is fixed by the class, so that `F(int)` is not confused with `F(int, int)` (a function
// template's explicit pack would only be a prefix of the deduced one).
template <typename... Args>
struct OverloadOf {
  template <typename R>
  static constexpr auto Pick(R (*f)(Args...)) {
    return f;
  }
  template <typename R, typename C>
  static constexpr auto Pick(R (C::*f)(Args...)) {
    return f;
  }
  template <typename R, typename C>
  static constexpr auto Pick(R (C::*f)(Args...) const) {
    return f;
  }
};

// Whether a remote function may take a parameter of type P: by value, by const reference
// or by lvalue reference (the callee gets a deserialized copy it may modify; changes do not
// reach the caller). Rvalue references, pointers and ObjectRef references are refused.
template <typename P>
constexpr bool IsSupportedParameter() {
  return !std::is_rvalue_reference_v<P> && !std::is_pointer_v<std::remove_reference_t<P>>;
}

template <typename... P>
constexpr void CheckParameters() {
  static_assert((IsSupportedParameter<P>() && ...),
                "raio: remote function and actor method parameters must be taken by value, "
                "const T& or T& (the callee gets a deserialized copy); T&& and raw pointers "
                "are not supported");
}

// Passes a decoded argument to a parameter of type P: moved for a by-value parameter,
// as an lvalue for a reference parameter.
template <typename P, typename V>
decltype(auto) PassArg(V& value) {
  if constexpr (std::is_lvalue_reference_v<P>) {
    return static_cast<V&>(value);
  } else {
    return static_cast<V&&>(value);
  }
}

using FunctionKey = void (*)();

template <typename R, typename... A>
FunctionKey KeyOf(R (*fn)(A...)) {
  return reinterpret_cast<FunctionKey>(fn);
}

template <typename Tuple, std::size_t... I>
Tuple UnpackArgs(const std::vector<ValueView>& args, std::index_sequence<I...>) {
  return Tuple{Decode<std::tuple_element_t<I, Tuple>>(args[I])...};
}

// Decodes the arguments, calls the function and encodes its result.
template <typename R, typename... A>
EncodedValue Invoke(const void* key, const std::vector<ValueView>& args) {
  auto fn = reinterpret_cast<R (*)(A...)>(reinterpret_cast<FunctionKey>(const_cast<void*>(key)));
  if (args.size() != sizeof...(A)) {
    throw SerializationError("expected " + std::to_string(sizeof...(A)) + " arguments, got " +
                             std::to_string(args.size()));
  }
  using Tuple = std::tuple<std::decay_t<A>...>;
  Tuple values = UnpackArgs<Tuple>(args, std::index_sequence_for<A...>{});
  auto call = [&]<std::size_t... I>(std::index_sequence<I...>)->decltype(auto) {
    return fn(PassArg<A>(std::get<I>(values))...);
  };
  if constexpr (std::is_void_v<R>) {
    call(std::index_sequence_for<A...>{});
    return EncodedValue{ValueFormat::kMsgpack, DType::kNone, PackNil()};
  } else {
    if constexpr (ReturnsOf<R>::kTuple) {
      return EncodeReturns(call(std::index_sequence_for<A...>{}));
    } else {
      return Encode(call(std::index_sequence_for<A...>{}));
    }
  }
}

// Turns the text of one RAIO_REMOTE entry into its registered name:
// "Add" -> "Add", "&ns::F" -> "ns::F", "RAIO_FUNC(Scale, int)" -> "Scale(int)".
RAIO_EXPORT std::string FunctionNameFromMacroText(std::string_view text);
// Splits "a, RAIO_FUNC(b, int, int)" at top-level commas.
RAIO_EXPORT std::vector<std::string> SplitMacroList(std::string_view text);

using Invoker = EncodedValue (*)(const void* key, const std::vector<ValueView>& args);
// `site` is "file:line" of the RAIO_REMOTE that registers it.
RAIO_EXPORT void RegisterFunctionWithInvoker(const std::string& name, const void* key,
                                             Invoker invoker, const std::string& site);

// --- actors: factories and methods ---

template <typename R>
struct FactoryTraits : std::false_type {};
template <typename C>
struct FactoryTraits<C*> : std::true_type {
  using Class = C;
};
template <typename C>
struct FactoryTraits<std::unique_ptr<C>> : std::true_type {
  using Class = C;
};

// A constructed actor instance and how to destroy it.
struct ActorInstance {
  void* instance = nullptr;
  void (*deleter)(void*) = nullptr;
};
using FactoryInvoker = ActorInstance (*)(const void* key, const std::vector<ValueView>& args);
using MethodInvoker = EncodedValue (*)(void* instance, const void* key,
                                       const std::vector<ValueView>& args);

template <typename R, typename... A>
ActorInstance InvokeFactory(const void* key, const std::vector<ValueView>& args) {
  using C = typename FactoryTraits<R>::Class;
  auto fn = reinterpret_cast<R (*)(A...)>(reinterpret_cast<FunctionKey>(const_cast<void*>(key)));
  if (args.size() != sizeof...(A)) {
    throw SerializationError("expected " + std::to_string(sizeof...(A)) + " arguments, got " +
                             std::to_string(args.size()));
  }
  using Tuple = std::tuple<std::decay_t<A>...>;
  Tuple values = UnpackArgs<Tuple>(args, std::index_sequence_for<A...>{});
  auto call = [&]<std::size_t... I>(std::index_sequence<I...>)->R {
    return fn(PassArg<A>(std::get<I>(values))...);
  };
  C* instance = nullptr;
  if constexpr (std::is_pointer_v<R>) {
    instance = call(std::index_sequence_for<A...>{});
  } else {
    instance = call(std::index_sequence_for<A...>{}).release();
  }
  if (instance == nullptr) throw std::runtime_error("the actor factory returned null");
  return ActorInstance{instance, [](void* p) { delete static_cast<C*>(p); }};
}

template <typename M, typename R, typename C, typename... A>
EncodedValue InvokeMethod(void* instance, const void* key, const std::vector<ValueView>& args) {
  M method = *static_cast<const M*>(key);
  if (args.size() != sizeof...(A)) {
    throw SerializationError("expected " + std::to_string(sizeof...(A)) + " arguments, got " +
                             std::to_string(args.size()));
  }
  using Tuple = std::tuple<std::decay_t<A>...>;
  Tuple values = UnpackArgs<Tuple>(args, std::index_sequence_for<A...>{});
  C* self = static_cast<C*>(instance);
  auto call = [&]<std::size_t... I>(std::index_sequence<I...>)->decltype(auto) {
    return (self->*method)(PassArg<A>(std::get<I>(values))...);
  };
  if constexpr (std::is_void_v<R>) {
    call(std::index_sequence_for<A...>{});
    return EncodedValue{ValueFormat::kMsgpack, DType::kNone, PackNil()};
  } else {
    if constexpr (ReturnsOf<R>::kTuple) {
      return EncodeReturns(call(std::index_sequence_for<A...>{}));
    } else {
      return Encode(call(std::index_sequence_for<A...>{}));
    }
  }
}

// Registered methods of one signature, for finding a method's name from its pointer.
template <typename M>
std::vector<std::pair<M, std::string>>& MethodTable() {
  static auto* table = new std::vector<std::pair<M, std::string>>();
  return *table;
}

RAIO_EXPORT void RegisterFactoryWithInvoker(const std::string& name, const void* key,
                                            const std::string& class_name, FactoryInvoker invoker,
                                            const std::string& site);
RAIO_EXPORT void RegisterMethodWithInvoker(const std::string& name, const void* key,
                                           MethodInvoker invoker, const std::string& site);

template <typename M, typename R, typename C, typename... A>
void RegisterMethod(const std::string& name, M method, const std::string& site) {
  CheckParameters<A...>();
  auto* stored = new M(method);  // stable key for the invoker; lives for the process
  MethodTable<M>().emplace_back(method, name);
  RegisterMethodWithInvoker(name, stored, &InvokeMethod<M, R, C, A...>, site);
}

template <typename R, typename C, typename... A>
void RegisterOne(const std::string& name, const std::string& site, R (C::*method)(A...)) {
  RegisterMethod<R (C::*)(A...), R, C, A...>(name, method, site);
}
template <typename R, typename C, typename... A>
void RegisterOne(const std::string& name, const std::string& site, R (C::*method)(A...) const) {
  RegisterMethod<R (C::*)(A...) const, R, C, A...>(name, method, site);
}

template <typename R, typename... A>
void RegisterOne(const std::string& name, const std::string& site, R (*fn)(A...)) {
  CheckParameters<A...>();
  if constexpr (FactoryTraits<R>::value) {
    RegisterFactoryWithInvoker(name, reinterpret_cast<const void*>(KeyOf(fn)),
                               DemangledTypeName(typeid(typename FactoryTraits<R>::Class)),
                               &InvokeFactory<R, A...>, site);
  } else {
    RegisterFunctionWithInvoker(name, reinterpret_cast<const void*>(KeyOf(fn)), &Invoke<R, A...>,
                                site);
  }
}

template <typename... Fs>
bool RegisterAll(const char* file, int line, const char* macro_text, Fs... fns) {
  std::vector<std::string> names = SplitMacroList(macro_text);
  const std::string site = std::string(file) + ":" + std::to_string(line);
  std::size_t i = 0;
  (RegisterOne(FunctionNameFromMacroText(names[i++]), site, fns), ...);
  return true;
}

}  // namespace internal
}  // namespace raio

#define RAIO_INTERNAL_CONCAT2(a, b) a##b
#define RAIO_INTERNAL_CONCAT(a, b) RAIO_INTERNAL_CONCAT2(a, b)

// Selects one overload of a function by its parameter types: RAIO_FUNC(Scale, int).
// RAIO_FUNC(Create) picks the overload without parameters. Works for static and member
// functions: RAIO_FUNC(&Counter::Add, int).
#define RAIO_FUNC(f, ...) ::raio::internal::OverloadOf<__VA_ARGS__>::Pick(f)

// Registers free functions as remote functions (see the file comment).
#define RAIO_REMOTE(...)                                                         \
  static const bool RAIO_INTERNAL_CONCAT(raio_remote_registered_, __COUNTER__) = \
      ::raio::internal::RegisterAll(__FILE__, __LINE__, #__VA_ARGS__, __VA_ARGS__)
