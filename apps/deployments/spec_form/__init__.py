"""The topology as a form: spec data <-> the raw strings of the form editor, and validation problems placed on
the form field they name.

Field names are spec paths (`instances[2].tp`, `proxy.port`) with the form's own row numbers, so a problem's path
only needs its list index translated from the spec (where removed and blank rows are gone) to the form row.
Fields the form does not edit (an instance's devices, extra_args and env, env that extends included, and any
InstanceSpec field added later; store.memory_mb, transfer_ports, simulation, kv_connector, proxy.kv_events, and
proxy.admin_port unless it is the default port + 1) ride along unchanged in hidden JSON, so saving from the form never drops them. An
instance's node cell lists every node it spans ("node2, node3"): one name saves as `node:`, several as `nodes:`.
"""

from .layout import form_context
from .save import spec_form_save
from .state import FormProblem, FormState, state_from_post, state_from_spec

__all__ = ["FormProblem", "FormState", "form_context", "spec_form_save", "state_from_post", "state_from_spec"]
