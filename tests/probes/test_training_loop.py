"""The training-loop ops (``save``, ``load``, ``set_lr``, ``replace``, ``backward``, ``step``'s
``dampening``) on each framework, against what its documentation and upstream reports say. Each program is a bundled
case file (or that case with one field changed), run on every CPU target; each test names the
documentation or report its expectation rests on."""

from __future__ import annotations

import pytest

from harness.case import ops
from harness.case.case_file import load_case
from harness.case.ir import Program, check_program
from tests.conftest import CASES
from tests.support.probe_client import BURN_TARGETS

TORCH = ("torch:cpu", "torch:cpu+foreach")
BURN = tuple(BURN_TARGETS)


def _case(name: str) -> Program:
    return load_case(CASES / f"{name}.toml")


def _changed(program: Program, i: int, field: str, value) -> Program:
    """``program`` with field ``field`` of op ``i`` set to ``value``."""
    new = list(program.ops)
    new[i] = ops.with_field(new[i], field, value)
    return Program(program.tensors, check_program(program.tensors, new), program.title)


def _value(trace, i: int, name: str):
    return trace.state_after(i)[name].value.tolist()


def _identity(trace, i: int, name: str):
    return trace.state_after(i)[name].identity


@pytest.fixture(scope="module")
def run(runner):
    def run(program: Program):
        traces = runner.run_one(program, every_target=True)
        missing = set(TORCH + BURN + ("candle:cpu",)) - set(traces)
        if missing:
            pytest.fail(f"targets missing here: {sorted(missing)}")
        return traces

    return run


def _statuses(trace) -> list[str]:
    return [s.status for s in trace.steps]


# ---- save / load ----------------------------------------------------------------------------


def test_a_state_dict_kept_in_memory_follows_training_in_torch(run):
    # pytorch/pytorch#34765, pytorch/tutorials#188: state_dict() entries are param.detach(),
    # references to the parameters' storage, so "best" holds the trained values and the load
    # restores nothing.
    traces = run(_case("state_dict_best_weights_follow_training"))
    for t in TORCH:
        assert _statuses(traces[t]) == ["ok", "ok", "ok"], t
        assert _value(traces[t], 1, "best.w") == [0.5, 1.5], t
        assert _value(traces[t], 2, "w") == [0.5, 1.5], t


def test_a_burn_record_is_a_copy_and_its_load_restores(run):
    # burn-core Module::into_record: the record holds the params' tensors, which are values
    # (the burn book, "Tensor"): training rebinds the model's params and the record keeps.
    traces = run(_case("state_dict_best_weights_follow_training"))
    for t in BURN:
        assert _statuses(traces[t]) == ["ok", "ok", "ok"], t
        assert _value(traces[t], 1, "best.w") == [1.0, 2.0], t
        assert _value(traces[t], 2, "w") == [1.0, 2.0], t


def test_candle_refuses_to_load_its_own_vars(run):
    # candle-core Var::set: "cannot set a variable to a tensor that is derived from its value";
    # an in-memory candle checkpoint is the VarMap's map, whose Vars are the model's.
    trace = run(_case("state_dict_best_weights_follow_training"))["candle:cpu"]
    assert _statuses(trace)[:2] == ["ok", "ok"]
    assert _value(trace, 1, "best.w") == [0.5, 1.5]  # the same Var: it follows the step
    load = trace.steps[2]
    assert load.status == "error" and "derived from its value" in (load.message or ""), load


def test_a_checkpoint_file_restores_the_saved_values_everywhere(run):
    # torch.save / torch.load (a copy on disk), candle VarMap::save / VarMap::load ("modify the
    # existing variables to have these values"), burn save_file / load_file.
    traces = run(_case("checkpoint_file_restores_best_weights"))
    for t, trace in traces.items():
        assert _statuses(trace) == ["ok", "ok", "ok"], t
        assert _value(trace, 1, "w") == [0.5, 1.5] and _value(trace, 1, "best.w") == [1.0, 2.0], t
        assert _value(trace, 2, "w") == [1.0, 2.0], t


def test_load_state_dict_copies_into_the_existing_parameter(run):
    # pytorch/pytorch#98906: load_state_dict copies in place (param.copy_(input_param)), so the
    # parameter stays the same object and a detach() taken before follows the load. candle's
    # VarMap::load is Var::set into the existing Var: the same.
    traces = run(_case("load_state_dict_copies_in_place"))
    for t in TORCH + ("candle:cpu",):
        assert _value(traces[t], 2, "s") == [5.0, 5.0], t
        assert _value(traces[t], 3, "w") == [1.0, 2.0] and _value(traces[t], 3, "s") == [1.0, 2.0], t
        assert _identity(traces[t], 3, "w") == _identity(traces[t], 2, "w"), t


def test_load_state_dict_with_assign_installs_new_parameters(run):
    # torch Module.load_state_dict(assign=True) (pytorch/pytorch#188346): the module's slot holds
    # a new Parameter; a detach() of the old one keeps the old values.
    traces = run(_changed(_case("load_state_dict_copies_in_place"), 3, "assign", True))
    for t in TORCH:
        assert _value(traces[t], 3, "w") == [1.0, 2.0] and _value(traces[t], 3, "s") == [5.0, 5.0], t
        assert _identity(traces[t], 3, "w") != _identity(traces[t], 2, "w"), t
    # Only torch has an assign keyword: candle and burn have one load call each.
    for t in BURN + ("candle:cpu",):
        assert traces[t].steps[3].status == "unsupported", t


def test_after_an_assign_load_the_optimizer_no_longer_trains_the_model(run):
    # pytorch/tutorials#2824 (swap_tensors), pytorch/pytorch#21682: an optimizer made before the
    # parameter was replaced keeps the old object, and step() silently leaves the model.
    traces = run(_case("load_assign_leaves_the_optimizer_behind"))
    for t in TORCH:
        assert _statuses(traces[t]) == ["ok"] * 4, t
        assert _value(traces[t], 2, "w") == [1.0, 2.0] and _value(traces[t], 3, "w") == [1.0, 2.0], t
    in_place = run(_changed(_case("load_assign_leaves_the_optimizer_behind"), 2, "assign", False))
    for t, trace in in_place.items():
        assert _value(trace, 3, "w") == [0.5, 1.5], t  # load in place: the optimizer trains w


def test_a_loaded_param_keeps_its_id_and_its_momentum(run):
    # tracel-ai/burn#5130, fixed by #5177: load_record restores the persisted ParamId, so the
    # optimizer's state (SGD momentum, keyed by ParamId) carries on: buffer 1, then 0.5 * 1 + 1.
    # torch: the in-place load keeps the parameter object the optimizer holds.
    traces = run(_case("load_keeps_the_optimizer_state"))
    for t in TORCH + BURN:
        assert _statuses(traces[t]) == ["ok"] * 4, t
        assert _value(traces[t], 2, "w") == [1.0, 2.0], t
        assert _value(traces[t], 3, "w") == [0.25, 1.25], t
    for t in BURN:
        assert _identity(traces[t], 2, "w") == _identity(traces[t], 0, "w"), t


def test_a_checkpoint_holds_the_buffers_in_torch_only(run):
    # torch Module.state_dict: "both parameters and persistent buffers"; the candle and burn
    # probes hold a buffer outside the VarMap / module, so their checkpoints leave it.
    traces = run(_case("torch_checkpoint_holds_buffers"))
    for t in TORCH:
        assert _value(traces[t], 3, "b") == [3.0, 4.0] and _value(traces[t], 3, "s") == [3.0, 4.0], t
    for t in BURN + ("candle:cpu",):
        assert _value(traces[t], 3, "b") == [5.0, 5.0], t


# ---- the optimizer's lifecycle ----------------------------------------------------------------


def test_set_lr_keeps_the_live_optimizer_and_its_momentum(run):
    # torch: param_groups[i]["lr"] on the live optimizer; burn: Optimizer::step takes the
    # learning rate, the momentum state stays. Momentum buffer 1, then 0.5 * 1 + 1 = 1.5 at 0.25.
    traces = run(_case("set_lr_keeps_the_optimizer_state"))
    for t in TORCH + BURN:
        assert _statuses(traces[t]) == ["ok"] * 3, t
        assert _value(traces[t], 2, "w") == [0.125, 1.125], t


def test_a_step_with_the_old_lr_after_set_lr_is_a_new_optimizer(run):
    # The case format keys live optimizers by their hyper-parameters: after set_lr the old
    # learning rate names no live optimizer, so that step makes a fresh one (momentum buffer = g).
    traces = run(_changed(_case("set_lr_keeps_the_optimizer_state"), 2, "lr", 0.5))
    for t in TORCH + BURN:
        assert _value(traces[t], 2, "w") == [0.0, 1.0], t


def test_candle_set_learning_rate_changes_the_live_optimizer(run):
    # huggingface/candle#687: Optimizer::set_learning_rate on the live SGD. candle-nn's SGD has
    # no momentum, so only the learning rate is observable: 0.5, then 0.25.
    program = _case("set_lr_keeps_the_optimizer_state")
    for i in (0, 1, 2):
        program = _changed(program, i, "optimizer", "sgd")
    trace = run(program)["candle:cpu"]
    assert _statuses(trace) == ["ok"] * 3
    assert _value(trace, 0, "w") == [0.5, 1.5] and _value(trace, 2, "w") == [0.25, 1.25]


def test_sgd_dampening_is_skipped_on_the_first_step(run):
    # pytorch/pytorch#152833: the first momentum step uses the gradient itself (w 1 -> 0.5);
    # the second damps it: buffer 0.5 * 1 + (1 - 0.5) * 1 = 1 (w 0.5 -> 0). burn agrees.
    traces = run(_case("sgd_dampening_skips_the_first_step"))
    for t in TORCH + BURN:
        assert _value(traces[t], 0, "w") == [0.5, 1.5], t
        assert _value(traces[t], 1, "w") == [0.0, 1.0], t


# ---- replacing a parameter -------------------------------------------------------------------


def test_a_parameter_replaced_by_a_new_object_is_left_by_the_optimizer(run):
    # torch: the optimizer holds the Parameter it was made with (pytorch/tutorials#2824);
    # candle: the optimizer holds the Vars of VarMap::all_vars at its creation; burn: the
    # optimizer steps the module it is handed, and Param::from_tensor's new id starts fresh
    # (tracel-ai/burn#2428): SGD needs no state, so w is trained.
    traces = run(_case("replace_new_param_is_left_by_the_optimizer"))
    for t, trace in traces.items():
        assert _statuses(trace) == ["ok"] * 3, t
        assert _value(trace, 1, "w") == [3.0, 4.0], t
        assert _identity(trace, 1, "w") != _identity(trace, 0, "w"), t
    for t in TORCH + ("candle:cpu",):
        assert _value(traces[t], 2, "w") == [3.0, 4.0], t
    for t in BURN:
        assert _value(traces[t], 2, "w") == [2.5, 3.5], t


def test_nn_parameter_shares_the_tensor_var_from_tensor_copies_it(run):
    # pytorch/pytorch#22821: nn.Parameter(t) shares t's storage; candle Var::from_tensor copies a
    # tensor that is not a Var (make_var), candle#2124.
    traces = run(_case("nn_parameter_shares_storage"))
    for t in TORCH:
        assert _value(traces[t], 1, "w") == [5.0, 5.0], t
    for t in BURN + ("candle:cpu",):
        assert _value(traces[t], 1, "w") == [3.0, 4.0], t


def test_data_assignment_keeps_the_parameter_over_the_new_storage(run):
    # torch Tensor.data setter: the same Parameter (the optimizer trains it) now over b's storage,
    # so the step moves b too. burn Param::map keeps the ParamId, but onto b's untracked tensor:
    # the next backward has nothing to track. candle has no such call.
    traces = run(_case("replace_data_keeps_the_parameter"))
    for t in TORCH:
        assert _identity(traces[t], 1, "w") == _identity(traces[t], 0, "w"), t
        assert _value(traces[t], 2, "w") == [2.5, 3.5] and _value(traces[t], 2, "b") == [2.5, 3.5], t
    for t in BURN:
        assert _identity(traces[t], 1, "w") == _identity(traces[t], 0, "w"), t
        step = traces[t].steps[2]
        assert step.status == "error" and "tracked" in (step.message or ""), (t, step)
    assert traces["candle:cpu"].steps[1].status == "unsupported"


def test_set_rebinds_the_parameter_to_the_storage_in_torch_only(run):
    # torch Tensor.set_: the same object, now a view of b's storage; candle and burn have no call.
    traces = run(_changed(_case("nn_parameter_shares_storage"), 0, "how", "set"))
    for t in TORCH:
        assert _identity(traces[t], 0, "w") == _identity(traces[t], -1, "w"), t
        assert _value(traces[t], 1, "w") == [5.0, 5.0], t
    for t in BURN + ("candle:cpu",):
        assert traces[t].steps[0].status == "unsupported", t


# ---- tied parameters (replace with how = "tie") ---------------------------------------------


def test_a_tied_parameter_across_one_step(run):
    # Both slots' terms add to the gradient (2 per element). torch: parameters() lists a tied
    # Parameter once (pytorch/pytorch#40967), so one update: 1 - 0.5 * 2 = 0. candle:
    # VarMap::all_vars lists the Var once per key (candle-nn var_map.rs), so SGD updates it twice.
    # burn: the optimizer maps each field and the gradient (by ParamId) is used up by the first,
    # so the second field keeps its old value: the tie holds the id but not the values.
    traces = run(_case("tied_parameters_across_a_step"))
    for t in TORCH:
        assert _identity(traces[t], 0, "a") == _identity(traces[t], 0, "b"), t
        assert _value(traces[t], 1, "a") == [0.0, 1.0] and _value(traces[t], 1, "b") == [0.0, 1.0], t
    candle = traces["candle:cpu"]
    assert _value(candle, 1, "a") == [-1.0, 0.0] and _value(candle, 1, "b") == [-1.0, 0.0]
    for t in BURN:
        assert _identity(traces[t], 1, "a") == _identity(traces[t], 1, "b"), t
        assert _value(traces[t], 1, "a") == [0.0, 1.0] and _value(traces[t], 1, "b") == [1.0, 2.0], t


def test_load_state_dict_with_assign_unties_parameters(run):
    # pytorch/pytorch#188346: assign=True installs each state-dict entry as its own Parameter.
    traces = run(_case("load_assign_unties_parameters"))
    for t in TORCH:
        assert _identity(traces[t], 1, "a") == _identity(traces[t], 1, "b"), t
        assert _identity(traces[t], 2, "a") != _identity(traces[t], 2, "b"), t


def test_a_module_clone_keeps_the_tie(run):
    # copy.deepcopy's memo copies one Parameter once, so the copy's two slots hold one object.
    traces = run(_case("module_clone_of_tied_parameters"))
    for t in TORCH:
        assert _identity(traces[t], 1, "m.a") == _identity(traces[t], 1, "m.b"), t
        assert _value(traces[t], 2, "m.b") == [5.0, 5.0] and _value(traces[t], 2, "a") == [1.0, 2.0], t


def test_only_a_parameter_can_be_tied(run):
    # torch Module.__setattr__ refuses a plain tensor for a parameter slot (TypeError); a VarMap
    # holds Vars and a burn param field a Param.
    program = _changed(_changed(_case("nn_parameter_shares_storage"), 0, "how", "tie"), 0, "value", "b")
    traces = run(program)
    for t in TORCH:
        step = traces[t].steps[0]
        assert step.status == "error" and "TypeError" in (step.message or ""), (t, step)
    for t in BURN + ("candle:cpu",):
        assert traces[t].steps[0].status == "unsupported", t


def test_a_step_after_a_backward_pass_uses_both_passes_gradients(run):
    # torch backward() "accumulates gradients in the leaves"; burn GradientsAccumulator; candle
    # GradStores added var by var (the case file names the sources). SGD lr 0.5, grad [1, -1]:
    # two passes move w by [-1, 1], the next step (one pass) by [-0.5, 0.5].
    traces = run(_case("gradient_accumulation_sums_two_passes"))
    for t in (*TORCH, "candle:cpu", *BURN):
        assert [s.status for s in traces[t].steps] == ["ok"] * 3, t
        assert _value(traces[t], 0, "w") == [1.0, 2.0], t  # a backward pass alone changes nothing
        assert _value(traces[t], 1, "w") == [0.0, 3.0], t
        assert _value(traces[t], 2, "w") == [-0.5, 3.5], t


def test_an_accumulated_gradient_stays_with_the_parameter_object(run):
    # torch: w.data = b keeps the object, and so its .grad: two passes' worth, w = b - 2 * 0.5 g.
    # nn.Parameter(b) (how = new) starts without one: one pass. candle's Var::from_tensor of the
    # plain tensor b is a new Var, whose id the pending GradStore does not hold; burn's
    # Param::from_tensor a new ParamId, which the accumulator does not hold: one pass as well.
    data = run(_case("accumulated_gradient_follows_the_parameter_object"))
    for t in TORCH:
        assert _value(data[t], 2, "w") == [4.0, 6.0], t
    new = run(_changed(_case("accumulated_gradient_follows_the_parameter_object"), 1, "how", "new"))
    for t in (*TORCH, "candle:cpu", *BURN):
        assert _value(new[t], 2, "w") == [4.5, 5.5], t


def test_a_load_into_parameters_sharing_storage_ends_with_the_last_entry(run):
    # Module._load_from_state_dict copies entry by entry (param.copy_(input_param)): after
    # w.data = b they are one storage, so b's entry, copied last, is what both hold. burn's
    # load_record restores each param's own value.
    traces = run(_case("torch_load_writes_through_shared_storage"))
    for t in TORCH:
        assert _value(traces[t], 2, "w") == [0.0, 1.0] == _value(traces[t], 2, "b"), t
    for t in BURN:
        assert _value(traces[t], 2, "w") == [0.0, 0.0] and _value(traces[t], 2, "b") == [0.0, 1.0], t
