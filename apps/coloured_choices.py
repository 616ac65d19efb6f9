"""Choices whose every member carries its UI colour, as NetBox's ChoiceSets do: `RUNNING = "running", "Running",
"blue"`. The colour is one of COLOURS, each a class of static/css/app.css (`.badge.blue`, `.bar-fill.blue`) and a
name in the topology picture's palette; pages, API payloads and scripts read it from the member (`colour`,
`colour_of(value)`), so no other place maps a status to its colour."""

from __future__ import annotations

from django.db import models
from django.db.models.enums import ChoicesType

COLOURS = ("green", "amber", "red", "blue", "grey", "purple")
UNKNOWN_COLOUR = "grey"


class ColouredChoicesType(ChoicesType):
    """Takes each member's colour (the last item) off before Django reads its value and label."""

    def __new__(metacls, classname, bases, classdict, **kwds):
        colours = {}
        for key in classdict._member_names:
            *value_and_label, colour = classdict[key]
            if colour not in COLOURS:
                raise TypeError(f"{classname}.{key}: colour {colour!r} is not one of {', '.join(COLOURS)}")
            colours[key] = colour
            dict.__setitem__(classdict, key, tuple(value_and_label))
        cls = super().__new__(metacls, classname, bases, classdict, **kwds)
        for key, colour in colours.items():
            cls[key]._colour_ = colour
        return cls


class ColouredChoices(models.TextChoices, metaclass=ColouredChoicesType):
    @property
    def colour(self) -> str:
        return self._colour_

    @classmethod
    def colour_of(cls, value) -> str:
        """The colour of a stored value; grey for one the choices do not (or no longer) know, and for None."""
        try:
            return cls(value).colour
        except ValueError:
            return UNKNOWN_COLOUR

    @classmethod
    def colours(cls) -> dict[str, str]:
        """{value: colour} of every member, for a JSON payload."""
        return {member.value: member.colour for member in cls}
