"""The candle reproducer of a case: the candle probe's transcript of it (the calls the probe
made, spelled once in ``rust_probes/candle_probe/src/session.rs``), wrapped in a ``main`` by
``harness/targets/rust_reproducer.py``. This module holds only what surrounds the transcript:
the ``use`` lines, the print helper, and the set-up a program may not read."""

from __future__ import annotations

from harness.targets.rust_reproducer import Scaffold

SCAFFOLD = Scaffold(
    framework="candle",
    probe="candle_probe",
    crates=("candle-core", "candle-nn", "half"),
    uses=(
        "use candle_core::{DType, Device, IndexOp, Tensor, Var};",
        "use candle_nn::{Init, ModuleT, Optimizer, VarMap};",
    ),
    helpers=(
        "/// The tensor's values, row-major, widened to f32 (exact for f16 and bf16).",
        "fn values(t: &Tensor) -> candle_core::Result<Vec<f32>> {",
        "    t.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()",
        "}",
        "",
        "/// Prints `label: name = [values]`.",
        "fn show(label: &str, name: &str, t: &Tensor) {",
        "    match values(t) {",
        '        Ok(v) => println!("{label}: {name} = {v:?}"),',
        '        Err(e) => println!("{label}: {name} = unreadable ({e})"),',
        "    }",
        "}",
    ),
    result="candle_core::Result<()>",
    errors="result",
    # The model's VarMap and the params' gradients are read only by the ops that step, save,
    # load, replace or clone the model; the dtype only by conversions.
    set_up=(
        ("varmap", r"(let mut varmap = |varmap\.data\(\)\.lock\(\)\.unwrap\(\)\.insert\()"),
        ("dt", r"let dt = "),
    ),
    unread_lets=r"let (?P<var>\w+_grad\d*) = ",
    values_of="values(&{var})?",
)
