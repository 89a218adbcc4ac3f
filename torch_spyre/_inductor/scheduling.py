"""Inductor scheduling for the spyre device: every fused group of pointwise
and reduction nodes becomes one device program."""

from __future__ import annotations

import itertools

from torch._inductor import scheduler as sched
from torch._inductor.codegen.common import BackendFeature, Kernel
from torch._inductor.utils import sympy_product
from torch._inductor.virtualized import V
from torch.utils._ordered_set import OrderedSet

from .capture import SpyreKernelTooLarge, SpyreLoweringError, capture_node
from .kernel_defs import compiled_kernels, define_kernel, new_kernel_name
from .lowering import _loads, check_group, lower_kernel
from .transposed_copy import transposed_copy_program
from .matmul import MATMUL_OP, MLP_OP, wanted_stick_layout

# Buffers given another stick layout by layout assignment in this process:
# (buffer, assigned host sizes).
layout_assignments: list = []

__all__ = ["SpyreScheduling", "compiled_kernels", "layout_assignments"]


class SpyreScheduling(sched.BaseScheduling):
    def __init__(self, scheduler):
        super().__init__(scheduler)
        self._captured = {}
        self._layouts_assigned = False

    def _assign_layouts(self) -> None:
        """Layout assignment: a buffer a spyre kernel produces and a matrix
        product reads with columns that merge several of its sticks is given
        the merged stick layout, when its producer can store it so (checked
        by lowering the producer); otherwise the product's lowering inserts
        a re-layout copy."""
        from torch._inductor import ir

        from .layouts import assign_layout, assigned_layout, unassign_layout
        producers = {}
        for node in self.scheduler.nodes:
            if isinstance(node, (sched.SchedulerNode, sched.FusedSchedulerNode)) and \
                    node.get_device() is not None and node.get_device().type == "spyre":
                for n in node.get_nodes():
                    for buf in n.get_outputs():
                        producers[buf.get_name()] = node
        for node in self.scheduler.nodes:
            kernel = getattr(node, "node", None)
            if not isinstance(kernel, ir.FallbackKernel) or \
                    kernel.op_overload not in (MATMUL_OP, MLP_OP):
                continue
            for inp in kernel.inputs:
                try:
                    name, want = wanted_stick_layout(inp)
                except SpyreLoweringError:
                    continue
                if want is None or name not in producers or assigned_layout(name):
                    continue
                assign_layout(name, want)
                if self._lowers(producers[name]):
                    layout_assignments.append((name, tuple(want)))
                else:
                    unassign_layout(name)

    def _lowers(self, group) -> bool:
        try:
            captured = [self._capture(n) for n in group.get_nodes()]
            lower_kernel(check_group("layout check", captured, removable=set()),
                         group.get_device().index)
        except SpyreLoweringError:
            return False
        return True

    def get_backend_features(self, device):
        # One program reduces a whole row: Inductor must not split
        # reductions into partial kernels.
        return OrderedSet([BackendFeature.REDUCE_TO_SINGLE_ELEMENT])

    def group_fn(self, sizes):
        return tuple(V.graph.sizevars.simplify(sympy_product(s)) for s in sizes)

    def _capture(self, snode):
        name = snode.get_name()
        if name not in self._captured:
            self._captured[name] = capture_node(snode)
        return self._captured[name]

    def _compatible(self, node1, node2) -> bool:
        from . import config
        if not config.fusion:
            return False
        nodes = list(node1.get_nodes()) + list(node2.get_nodes())
        if not all(isinstance(n, sched.SchedulerNode) for n in nodes):
            return False
        # An assertion has no device lowering: alone, it takes only itself to
        # the host fallback, not the work it would be fused with.
        if any(n.has_side_effects() for n in nodes):
            return False
        try:
            check_group("fusion", [self._capture(n) for n in nodes], removable=set())
        except SpyreLoweringError:
            return False
        return True

    def can_fuse_vertical(self, node1, node2) -> bool:
        return self._compatible(node1, node2)

    def can_fuse_horizontal(self, node1, node2) -> bool:
        return self._compatible(node1, node2)

    def codegen_node(self, node) -> None:
        if not self._layouts_assigned:
            # the scheduler's nodes are final once code generation starts; a
            # buffer is assigned before its producer (this kernel or a later
            # one) and so before any consumer is generated
            self._layouts_assigned = True
            self._assign_layouts()
        self._codegen_group(list(node.get_nodes()))
        self.free_buffers_in_scheduler()

    def _codegen_group(self, nodes) -> None:
        """One kernel for `nodes` (a device program, or the host fallback);
        frees nothing: a split group's later nodes still read its buffers."""
        wrapper = V.graph.wrapper_code
        fused_names = OrderedSet(n.get_name() for n in nodes)
        removable = set()
        outputs = set(V.graph.get_output_names())
        for n in nodes:
            for buf in n.get_outputs():
                name = buf.get_name()
                if name not in outputs and \
                        self.scheduler.can_buffer_be_removed_through_fusion(name, fused_names):
                    removable.add(name)
        kernel_name = new_kernel_name(nodes[0].get_name())
        captured = [self._capture(n) for n in nodes]
        device = nodes[0].get_device().index
        internal = set()
        program = transposed_copy_program(kernel_name, captured, device)
        if program is None:
            try:
                plan = check_group(kernel_name, captured, removable)
                program = lower_kernel(plan, device)
            except SpyreKernelTooLarge:
                raise  # a clear compile error, never a wrong program
            except SpyreLoweringError as e:
                builds = [self._lowers(n) for n in nodes] if len(nodes) > 1 else []
                if any(builds):
                    # The fusion check is cheaper than building the program:
                    # a group it let through may still not build (a store
                    # the fused loops cannot make). Each node that builds
                    # alone then gets its own kernel; each run of the others
                    # stays one host kernel, as the whole group would have.
                    for built, run in itertools.groupby(zip(builds, nodes), key=lambda x: x[0]):
                        run = [n for _, n in run]
                        for group in ([n] for n in run) if built else [run]:
                            self._codegen_group(group)
                    return
                self._host_fallback(kernel_name, nodes, captured, e)
                return
            internal = plan.internal
        spec, arg_names, info = program
        info.update(nodes=[n.get_name() for n in nodes])
        define_kernel(wrapper, kernel_name, spec, arg_names, info)
        with V.set_kernel_handler(Kernel()):
            for n in nodes:
                n.mark_run()
        wrapper.writeline(f"{kernel_name}.launch([{', '.join(arg_names)}])")
        V.graph.removed_buffers |= internal

    def _host_fallback(self, kernel_name, nodes, captured, error) -> None:
        """A kernel the device lowering rejects runs as a counted host
        evaluation of its loop bodies (host_kernel.py)."""
        from .host_kernel import host_kernel_source, record
        reason = str(error).split(": ", 1)[-1]
        # A buffer no one reads (an assertion's) is neither allocated nor stored.
        produced = [st.buffer for c in captured for st in c.stores
                    if st.buffer not in V.graph.removed_buffers]
        produced = list(dict.fromkeys(produced))
        loads = []
        for c in captured:
            for v in _loads(c):
                if v.args[0] not in produced and v.args[0] not in loads:
                    loads.append(v.args[0])
        source = host_kernel_source(kernel_name, captured, loads, produced)
        record(reason)
        compiled_kernels[kernel_name] = dict(name=kernel_name, kind="host", reason=reason,
                                             nodes=[n.get_name() for n in nodes],
                                             args=loads + produced)
        wrapper = V.graph.wrapper_code
        wrapper.header.splice(f"# {kernel_name}: host fallback ({reason})\n{source}")
        with V.set_kernel_handler(Kernel()):
            for n in nodes:
                n.mark_run()
        wrapper.writeline(f"{kernel_name}({', '.join(loads + produced)})")

    def codegen_template(self, template_node, epilogue_nodes, prologue_nodes):
        raise NotImplementedError("the spyre backend has no template kernels")

    def codegen_sync(self) -> None:
        pass

    def flush(self) -> None:
        pass

    def ready_to_flush(self) -> bool:
        return False

    def benchmark_fused_nodes(self, nodes):
        raise NotImplementedError("spyre kernels are not benchmarked during fusion")
