/*
 * pvm_packf / pvm_unpackf: printf-style packing. These two are C varargs
 * functions, which stable Rust cannot define, so they live here and call
 * the ordinary pvm_pk and pvm_upk entry points.
 *
 * A conversion is %[count][.stride][h|l]{c,d,u,x,f,s} (x is complex:
 * %x float complex, %lx double complex). With a count (digits or '*') the
 * argument is a pointer to that many items; without one it is a single
 * value (pack) or a pointer to one item (unpack). "%+" at the start of a
 * packf format takes an encoding and starts a new send buffer.
 *
 * The functions are exported as pvm_packf / pvm_unpackf by tail-jump
 * trampolines in src/varargs.rs (rustc hides C symbols of a cdylib).
 */
#include <stdarg.h>
#include <stdlib.h>
#include <ctype.h>
#include "pvm3.h"

int openvia_pvm_packf(const char *fmt, ...);
int openvia_pvm_unpackf(const char *fmt, ...);

struct conv {
	int has_count;
	int count;
	int stride;
	int size; /* -1 h, 0 plain, 1 l */
	char kind;
};

/* Reads one conversion after its '%'; returns the next position or NULL. */
static const char *parse_conv(const char *p, struct conv *c, va_list *ap)
{
	c->has_count = 0;
	c->count = 1;
	c->stride = 1;
	c->size = 0;
	if (*p == '*') {
		c->has_count = 1;
		c->count = va_arg(*ap, int);
		p++;
	} else if (isdigit((unsigned char)*p)) {
		c->has_count = 1;
		c->count = (int)strtol(p, (char **)&p, 10);
	}
	if (*p == '.') {
		p++;
		if (*p == '*') {
			c->stride = va_arg(*ap, int);
			p++;
		} else {
			c->stride = (int)strtol(p, (char **)&p, 10);
		}
	}
	if (*p == 'h') {
		c->size = -1;
		p++;
	} else if (*p == 'l') {
		c->size = 1;
		p++;
	}
	if (!*p)
		return NULL;
	c->kind = *p++;
	return p;
}

static int pack_value(const struct conv *c, va_list *ap)
{
	switch (c->kind) {
	case 'c': {
		char v = (char)va_arg(*ap, int);
		return pvm_pkbyte(&v, 1, 1);
	}
	case 'd':
	case 'i':
		if (c->size < 0) {
			short v = (short)va_arg(*ap, int);
			return pvm_pkshort(&v, 1, 1);
		}
		if (c->size > 0) {
			long v = va_arg(*ap, long);
			return pvm_pklong(&v, 1, 1);
		}
		{
			int v = va_arg(*ap, int);
			return pvm_pkint(&v, 1, 1);
		}
	case 'u':
		if (c->size < 0) {
			unsigned short v = (unsigned short)va_arg(*ap, unsigned int);
			return pvm_pkushort(&v, 1, 1);
		}
		if (c->size > 0) {
			unsigned long v = va_arg(*ap, unsigned long);
			return pvm_pkulong(&v, 1, 1);
		}
		{
			unsigned int v = va_arg(*ap, unsigned int);
			return pvm_pkuint(&v, 1, 1);
		}
	case 'f':
		if (c->size > 0) {
			double v = va_arg(*ap, double);
			return pvm_pkdouble(&v, 1, 1);
		}
		{
			float v = (float)va_arg(*ap, double);
			return pvm_pkfloat(&v, 1, 1);
		}
	case 's':
		return pvm_pkstr(va_arg(*ap, char *));
	default:
		return PvmBadParam;
	}
}

static int pack_array(const struct conv *c, va_list *ap)
{
	void *p = va_arg(*ap, void *);
	switch (c->kind) {
	case 'c':
		return pvm_pkbyte(p, c->count, c->stride);
	case 'd':
	case 'i':
		if (c->size < 0)
			return pvm_pkshort(p, c->count, c->stride);
		if (c->size > 0)
			return pvm_pklong(p, c->count, c->stride);
		return pvm_pkint(p, c->count, c->stride);
	case 'u':
		if (c->size < 0)
			return pvm_pkushort(p, c->count, c->stride);
		if (c->size > 0)
			return pvm_pkulong(p, c->count, c->stride);
		return pvm_pkuint(p, c->count, c->stride);
	case 'f':
		if (c->size > 0)
			return pvm_pkdouble(p, c->count, c->stride);
		return pvm_pkfloat(p, c->count, c->stride);
	case 'x':
		if (c->size > 0)
			return pvm_pkdcplx(p, c->count, c->stride);
		return pvm_pkcplx(p, c->count, c->stride);
	case 's':
		return pvm_pkstr(p);
	default:
		return PvmBadParam;
	}
}

static int unpack_into(const struct conv *c, va_list *ap)
{
	void *p = va_arg(*ap, void *);
	switch (c->kind) {
	case 'c':
		return pvm_upkbyte(p, c->count, c->stride);
	case 'd':
	case 'i':
		if (c->size < 0)
			return pvm_upkshort(p, c->count, c->stride);
		if (c->size > 0)
			return pvm_upklong(p, c->count, c->stride);
		return pvm_upkint(p, c->count, c->stride);
	case 'u':
		if (c->size < 0)
			return pvm_upkushort(p, c->count, c->stride);
		if (c->size > 0)
			return pvm_upkulong(p, c->count, c->stride);
		return pvm_upkuint(p, c->count, c->stride);
	case 'f':
		if (c->size > 0)
			return pvm_upkdouble(p, c->count, c->stride);
		return pvm_upkfloat(p, c->count, c->stride);
	case 'x':
		if (c->size > 0)
			return pvm_upkdcplx(p, c->count, c->stride);
		return pvm_upkcplx(p, c->count, c->stride);
	case 's':
		return pvm_upkstr(p);
	default:
		return PvmBadParam;
	}
}

int openvia_pvm_packf(const char *fmt, ...)
{
	va_list ap;
	const char *p = fmt;
	int cc = 0;

	if (!fmt)
		return PvmBadParam;
	va_start(ap, fmt);
	while (*p && cc >= 0) {
		struct conv c;
		if (*p++ != '%')
			continue;
		if (*p == '+') {
			p++;
			cc = pvm_initsend(va_arg(ap, int));
			if (cc > 0)
				cc = 0;
			continue;
		}
		p = parse_conv(p, &c, &ap);
		if (!p) {
			cc = PvmBadParam;
			break;
		}
		cc = c.has_count ? pack_array(&c, &ap) : pack_value(&c, &ap);
	}
	va_end(ap);
	return cc < 0 ? cc : 0;
}

int openvia_pvm_unpackf(const char *fmt, ...)
{
	va_list ap;
	const char *p = fmt;
	int cc = 0;

	if (!fmt)
		return PvmBadParam;
	va_start(ap, fmt);
	while (*p && cc >= 0) {
		struct conv c;
		if (*p++ != '%')
			continue;
		p = parse_conv(p, &c, &ap);
		if (!p) {
			cc = PvmBadParam;
			break;
		}
		cc = unpack_into(&c, &ap);
	}
	va_end(ap);
	return cc < 0 ? cc : 0;
}
