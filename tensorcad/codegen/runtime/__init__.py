"""The runtime codegen pastes into a generated module, as text: the imports and attention runtime
(``prelude``: ``attend``, its eager and FlexAttention forms, the block mask, rotary tables), the block mask
from a mask's ranges (``block_ranges``), each context-parallel rank's block mask (``cp_block_mask``) and the
stateful mixers' convolution and chunked scan (``mixers``). Each is a string the generator places; none
runs here."""
