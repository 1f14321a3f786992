"""TSAN checks of the pinned-memory caching allocator's snapshot code.

Submodules, one job each:

- :mod:`.tsan_command` writes the ``g++ -fsanitize=thread`` line against the installed torch
  (a whole program a reader can copy; torch and the standard library only);
- :mod:`.torchpaths` finds the installed torch's headers and ``libc10``;
- :mod:`.overlay` makes the "atomics removed" copy of the header;
- :mod:`.build` compiles ``harness.cpp`` with ``g++ -fsanitize=thread``, and the other programs (cached);
- :mod:`.runner` runs both variants: the other until it shows every race, the shipped one
  at least as often;
- :mod:`.tsan` parses ThreadSanitizer reports and the runtime's flag listing;
- :mod:`.races` names fields, mutexes and thread roles and groups the races into families;
- :mod:`.lockorder` reads the documented lock order from the header's Note and draws it with graphviz;
- :mod:`.pyapi` calls the Python side (``torch.cuda.memory``) without a GPU;
- :mod:`.compare` reads the header of every supported release, for the side-by-side section;
- :mod:`.edgecases` compiles and runs paths the harness does not take: ``free()`` with a failing
  event record, ``empty_cache()`` with an event queued in a private pool; it also reads what the
  CUDA backend calls when it records an event, and what its ``free`` override is made of;
- :mod:`.ringsweep` sweeps ``c10::RingBuffer`` over shrinking maxima under AddressSanitizer;
- :mod:`.statsrace` runs the statistics with a private pool in use under TSAN;
- :mod:`.errors` holds the errors that say what to install.

>>> from explainers.allocator import overlay
>>> overlay.ATOMIC_FIELDS[0]
'allocated_'
"""
