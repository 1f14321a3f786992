"""TSAN verification of the pinned-memory caching allocator's snapshot data races.

Submodules, one job each:

- :mod:`.torchpaths` finds the installed torch's headers and ``libc10``;
- :mod:`.overlay` makes the "fix reverted" copy of the header;
- :mod:`.build` compiles ``harness.cpp`` with ``g++ -fsanitize=thread`` (cached);
- :mod:`.runner` runs both variants, repeating the reverted one until both races show;
- :mod:`.tsan` parses ThreadSanitizer reports;
- :mod:`.races` names fields, mutexes and thread roles and groups the races into families;
- :mod:`.lockorder` draws the documented lock order from the header's Note;
- :mod:`.errors` holds the errors that say what to install.

>>> from explainers.allocator import overlay
>>> overlay.FIXED_FIELDS[0]
'allocated_'
"""
