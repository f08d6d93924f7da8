// autoround_cpp._core: the engine's calls for the Python package (python/autoround_cpp/), nothing else.
// The package builds command lines from AutoRound's keywords (autoround_cpp/options.py) and runs them
// here in-process (engine_calls.h); engine errors become the package's exceptions by kind (errors.py).
#include <cblas.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "cli/app.h"
#include "core/error.h"
#include "core/malloc_policy.h"
#include "core/printable.h"
#include "engine_calls.h"
#include "kernels/cpu/isa.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {
const char* kind_name(ar::ErrorKind k) {
  switch (k) {
    case ar::ErrorKind::InvalidInput: return "invalid_input";
    case ar::ErrorKind::Unsupported: return "unsupported";
    case ar::ErrorKind::Io: return "io";
    case ar::ErrorKind::Internal: return "internal";
  }
  return "internal";
}

// Raises autoround_cpp.errors.from_kind(kind, message) as the current Python exception.
void raise_kind(const char* kind, const std::string& message) {
  nb::object exc = nb::module_::import_("autoround_cpp.errors").attr("from_kind")(kind, ar::printable(message));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
}

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const ar::cli::UsageError& e) {
    raise_kind("usage", e.what());
  } catch (const ar::Error& e) {
    raise_kind(kind_name(e.kind()), e.what());
  }
}

nb::tuple logits(const std::string& model, const std::string& text, ar::py::LogBridge& bridge) {
  const ar::cli::LogitsResult r = ar::py::logits(model, text, bridge);
  nb::bytes data(r.logits.data(), r.logits.size() * sizeof(float));
  return nb::make_tuple(data, r.ids, r.vocab);
}
}  // namespace

NB_MODULE(_core, m) {
  ar::set_process_malloc_policy();  // the CLI's glibc settings (core/malloc_policy.h): per-block buffers unmapped
  nb::register_exception_translator(translate);
  nb::class_<ar::py::LogBridge>(m, "LogBridge")
      .def(nb::init<nb::object, nb::object>(), "line"_a.none(), "progress"_a.none())
      .def("cancel", &ar::py::LogBridge::cancel)
      .def_prop_ro("cancelled", &ar::py::LogBridge::cancelled);
  m.def(
      "openblas_core_to_set",
      [] {
        const char* core = ar::cpu::openblas_core_to_set(openblas_get_corename());
        return std::string(core ? core : "");
      },
      "The OPENBLAS_CORETYPE a process loading this module should have set first (the CLI restarts itself with it;\n"
      "kernels/cpu/isa.h), or '' where OpenBLAS's own choice stands.");
  m.def("run", &ar::py::run_command, "args"_a, "bridge"_a,
        "Runs the autoround command line (without the program name) in-process; returns its exit code.");
  m.def(
      "evaluate",
      [](std::string model, std::string ref_model, const std::string& text_path, const std::string& field,
         const std::string& text, int64_t ctx, int64_t batch, int threads, ar::py::LogBridge& bridge) {
        const ar::cli::EvalRequest req{std::move(model), std::move(ref_model), ctx, batch, threads, false};
        return ar::py::evaluate(req, text_path, field, text, bridge);
      },
      "model"_a, "ref_model"_a, "text_path"_a, "field"_a, "text"_a, "ctx"_a, "batch"_a, "threads"_a, "bridge"_a,
      "`eval --json`'s figures as JSON text (the text read from text_path, or text itself).");
  m.def("logits", &logits, "model"_a, "text"_a, "bridge"_a,
        "(fp32 logits as bytes [tokens, vocab], token ids, vocab) for the text.");
  m.attr("version") = AR_VERSION;
}
