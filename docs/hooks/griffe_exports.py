"""Griffe extension for the API reference: an exported function shadows its module.

horo/__init__.py does `from horo.allreduce import allreduce`, so at run time `horo.allreduce`
is the function; griffe, reading the code, keeps the submodule under that name. This puts the
function (an alias to it) back where Python has it, for every name in `__all__` that a
submodule of the same name defines.
"""
import griffe


class ExportedNamesShadowModules(griffe.Extension):
    def on_package(self, *, pkg, loader, **kwargs):
        for name in pkg.exports or ():
            member = pkg.members.get(name)
            if member is None or member.is_alias or not member.is_module or name not in member.members:
                continue
            pkg.set_member(name, griffe.Alias(name, member.members[name], parent=pkg))
